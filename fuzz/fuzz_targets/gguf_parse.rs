//! Fuzzes the GGUF parser: any input must give Ok or an error, never a panic, an abort on
//! allocation, or an out-of-bounds read. For accepted inputs, every tensor's data range must lie
//! inside the input and typed metadata access must not panic either.
#![no_main]

use fak::gguf::{Metadata, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(parsed) = parse(data) else { return };
    for t in &parsed.tensors {
        let end = t.file_offset.checked_add(t.n_bytes).expect("checked by parse");
        assert!(end <= data.len() as u64, "tensor {} outside the input", t.name);
        std::hint::black_box(&data[t.file_offset as usize..end as usize]);
    }
    let meta = Metadata::new("fuzz.gguf".into(), parsed.metadata);
    for (key, value) in meta.entries() {
        std::hint::black_box(value.to_string());
        let _ = meta.u32(key);
        let _ = meta.f32(key);
        let _ = meta.str_array(key);
        let _ = meta.int_array(key);
        let _ = meta.usize_per_layer(key, 4);
    }
});
