//! Prints fill / dequantize / quantize throughput of `engine/quant` (compiled in directly).
//! Each figure is the best of 5 runs on warm buffers; results go in `../quant-throughput.md`.

#[path = "../../../engine/quant/mod.rs"]
#[allow(dead_code)]
mod quant;

use quant::GgmlType;
use std::time::Instant;

fn best_of_5(mut f: impl FnMut()) -> f64 {
    f();
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    // A 27B-class projection: 25600 rows of 5120.
    let (row_len, n_rows) = (5120usize, 25600usize);
    let mut values = vec![0f32; row_len * n_rows];
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::F16,
    ] {
        let mut bytes = vec![0u8; ty.row_bytes(row_len as u64).unwrap() as usize * n_rows];
        let fill = best_of_5(|| {
            quant::fill_random_rows(ty, row_len, n_rows, 0.02, 1, &mut bytes).unwrap()
        });
        let dequant = best_of_5(|| quant::dequantize_into(ty, &bytes, &mut values).unwrap());
        println!(
            "{ty}: fill_random_rows {:.2} GB/s, dequantize_into {:.0} Melem/s",
            bytes.len() as f64 / fill / 1e9,
            values.len() as f64 / dequant / 1e6
        );
    }
    let src = &values[..4096 * 256];
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
    ] {
        let t = best_of_5(|| drop(quant::quantize(ty, src, 4096).unwrap()));
        println!("{ty}: quantize {:.1} Melem/s", src.len() as f64 / t / 1e6);
    }
}
