//! How [`super::Engine::teacher_forced_logits`] rounds, described so that the CPU reference can
//! round the same way (`harness threeway` judges fak's parity against that reference, not the
//! one that rounds nothing).
//!
//! The engine runs the ids in steps of up to `step_tokens`. A step of more than
//! `mat_vec_max_tokens` tokens multiplies its projections as mat-muls (cooperative-matrix tiles
//! round input and weights to f16: `Activations::F16Tiles`; the register-tiled fallback keeps
//! f32); a shorter one as mat-vecs (the int-dot path rounds the input to 8-bit blocks:
//! `Activations::Q8Blocks`). Attention reads an f16 KV cache on the f16 path. Teacher-forced
//! steps are prompt steps, which run the mat-mul however few ids they hold, so the engine
//! reports `mat_vec_max_tokens` 0; packets from before that (2026-12-04 #5) record 8, their
//! short last step a mat-vec, and are judged as they record.

use crate::gpu::KernelPaths;
use crate::gpu::kernels::kv_cache::KvDtype;
use crate::gpu::kernels::matmul::Matmul;
use crate::gpu::kernels::matvec::MatVec;
use crate::model::blocks::linear::QuantizedInput;
use crate::reference::{Activations, AttentionRounding};
use serde::{Deserialize, Serialize};

/// What the teacher-forced logits of one engine went through; `serve-arm` reports it among its
/// facts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeacherForcedRounding {
    /// Ids per step (the logit rows one step holds).
    pub step_tokens: usize,
    /// Steps of up to this many tokens run as mat-vecs, longer ones as mat-muls.
    pub mat_vec_max_tokens: usize,
    /// How a mat-vec step rounds its projections' inputs; None where the reference cannot
    /// (`not_emulated` says why).
    pub mat_vec: Option<Activations>,
    /// How a mat-mul step rounds its projections' inputs (and weights).
    pub mat_mul: Activations,
    pub attention: AttentionRounding,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_emulated: Option<String>,
}

/// Steps of one teacher-forced pass: `tokens` ids rounded as `activations` and `attention` say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub tokens: usize,
    pub activations: Activations,
    pub attention: AttentionRounding,
}

impl TeacherForcedRounding {
    /// The rounding of an engine on `paths` whose steps hold `step_tokens` ids.
    pub fn of(paths: KernelPaths, step_tokens: usize, mat_vec_max_tokens: usize) -> Self {
        let int_dot_types: Vec<_> = MatVec::Q8_TYPES
            .into_iter()
            .filter(|&t| QuantizedInput::takes(t))
            .collect();
        let (mat_vec, not_emulated) = match paths.int_dot {
            false => (Some(Activations::F32), None),
            true if int_dot_types.len() == MatVec::Q8_TYPES.len() => {
                (Some(Activations::Q8Blocks), None)
            }
            true => (
                None,
                Some(format!(
                    "FAK_INT_DOT_TYPES limits the integer mat-vecs to {int_dot_types:?}; the \
                     reference rounds the inputs of all of {:?}",
                    MatVec::Q8_TYPES
                )),
            ),
        };
        TeacherForcedRounding {
            step_tokens: step_tokens.max(1),
            mat_vec_max_tokens,
            mat_vec,
            mat_mul: match Matmul::runs_on_matrix_units(paths) {
                true => Activations::F16Tiles,
                false => Activations::F32,
            },
            attention: match KvDtype::of(paths) {
                KvDtype::F16 => AttentionRounding::F16Cache,
                KvDtype::F32 => AttentionRounding::F32,
            },
            not_emulated,
        }
    }

    /// The steps `n` ids take, in order; `Err` where a step's rounding is not emulated.
    pub fn steps(&self, n: usize) -> Result<Vec<Step>, String> {
        let mut steps = Vec::new();
        let mut left = n;
        while left > 0 {
            let tokens = left.min(self.step_tokens);
            let activations = if tokens > self.mat_vec_max_tokens {
                self.mat_mul
            } else {
                self.mat_vec.ok_or_else(|| {
                    self.not_emulated
                        .clone()
                        .unwrap_or_else(|| "mat-vec rounding not emulated".into())
                })?
            };
            steps.push(Step {
                tokens,
                activations,
                attention: self.attention,
            });
            left -= tokens;
        }
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_steps_are_mat_muls_and_the_tail_a_mat_vec() {
        let rounding = TeacherForcedRounding {
            step_tokens: 100,
            mat_vec_max_tokens: 8,
            mat_vec: Some(Activations::Q8Blocks),
            mat_mul: Activations::F16Tiles,
            attention: AttentionRounding::F16Cache,
            not_emulated: None,
        };
        let steps = rounding.steps(205).unwrap();
        let shape: Vec<(usize, Activations)> =
            steps.iter().map(|s| (s.tokens, s.activations)).collect();
        assert_eq!(
            shape,
            [
                (100, Activations::F16Tiles),
                (100, Activations::F16Tiles),
                (5, Activations::Q8Blocks)
            ]
        );
        assert!(
            steps
                .iter()
                .all(|s| s.attention == AttentionRounding::F16Cache)
        );
        let json = serde_json::to_value(&rounding).unwrap();
        assert_eq!(json["mat_mul"], "f16-tiles");
        assert_eq!(json["attention"], "f16-cache");
        let again: TeacherForcedRounding = serde_json::from_value(json).unwrap();
        assert_eq!(again, rounding);
        let partial = TeacherForcedRounding {
            mat_vec: None,
            not_emulated: Some("why".into()),
            ..rounding
        };
        assert_eq!(partial.steps(5).unwrap_err(), "why");
        assert_eq!(partial.steps(100).unwrap().len(), 1);
    }

    #[test]
    fn the_fallback_rounds_nothing_but_an_f16_path_caches_in_f16() {
        let plain = TeacherForcedRounding::of(KernelPaths::FALLBACK, 64, 8);
        assert_eq!(
            (plain.mat_vec, plain.mat_mul, plain.attention),
            (
                Some(Activations::F32),
                Activations::F32,
                AttentionRounding::F32
            )
        );
        let f16 = KernelPaths {
            f16: true,
            ..KernelPaths::FALLBACK
        };
        assert_eq!(
            TeacherForcedRounding::of(f16, 64, 8).attention,
            AttentionRounding::F16Cache
        );
    }
}
