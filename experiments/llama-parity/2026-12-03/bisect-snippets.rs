// Temporary bisection code (not kept), pasted into engine/reference/ops.rs for the README's figures.

// In Matrix::with_activations, before building Self: TMP_SKIP=a,b keeps f32 inputs for tensors
// whose name contains a or b.
let activations = match std::env::var("TMP_SKIP") {
    Ok(s) if s.split(',').any(|p| t.name.contains(p)) => Activations::F32,
    _ => activations,
};

// In Matrix::matvec, before rounding: TMP_ULP scales every third input up and every third down
// by 4 units in the last place of 1.0.
let nudged: Vec<f32> = if std::env::var("TMP_ULP").is_ok() {
    x.iter()
        .enumerate()
        .map(|(i, v)| v * match i % 3 { 0 => 1.0 + 4.0 * f32::EPSILON, 1 => 1.0 - 4.0 * f32::EPSILON, _ => 1.0 })
        .collect()
} else {
    x.to_vec()
};
let x = self.activations.round(self.ty, &nudged);
