//! spvdump — the cooperative-matrix pipelines an NVIDIA-like adapter builds (16×16 f16 → f32
//! matrices, 32-wide subgroups, 48 KiB of workgroup memory), each translated to SPIR-V by naga
//! as wgpu would (override constants applied first), written as `<out>/<name>.spv`, with
//! `<out>/manifest.tsv` saying which are the engine's defaults. Not part of the engine: compare.sh
//! copies it into a checkout's engine/examples/ and runs it there, so that two commits can be
//! compared pipeline by pipeline (experiments/NOTES.md "spvequiv"). It compiles against the engine
//! of 5f3b821 and of later commits alike: it uses only what both have (the default forms by
//! their FAK_GDN_CHUNK names, the attention's default tile by chosen_tile's rule).
//!
//!   cargo run -p fak --example spvdump -- OUT_DIR [PATCHED_DIR]
//!
//! With PATCHED_DIR, a module that has a `<PATCHED_DIR>/<name>.wgsl` is read from there instead
//! (the same pipelines and constants): how a difference is shown to be the one a reader named
//! (the edit that undoes it makes the programs equal).

use fak::gpu::kernels::attn_decode::AttnShape;
use fak::gpu::kernels::attn_prefill::{AttnPrefill, CoopTile};
use fak::gpu::kernels::delta_state::DeltaDims;
use fak::gpu::kernels::gated_delta_chunk::{ChunkKernel, GatedDeltaChunked};
use fak::gpu::kernels::matmul::{CoopKernel, Matmul};
use fak::gpu::{CoopShape, Kernel, KernelPaths, KernelSource, PipelineSpec};
use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};
use std::fmt::Write as _;
use std::path::Path;

/// NVIDIA's Vulkan workgroup memory (maxComputeSharedMemorySize), which picks the default tiles
/// and forms.
const LIMIT: u32 = 48 * 1024;

/// What the engine's `ctx.paths()` gives on an NVIDIA Vulkan adapter.
const NVIDIA: KernelPaths = KernelPaths {
    subgroup: true,
    f16: true,
    coop_matrix: Some(CoopShape::M16x16),
    int_dot: true,
};

/// The split scan (the default since 2e2bbf4) and the former default (its fallback where the
/// split scan's workgroup memory does not fit).
const GDN_SPLIT: &str = "coop+quads+fused+lean+splitk+blocks";
const GDN_UNSPLIT: &str = "coop+quads+fused+lean+blocks";

/// One module to translate: a name that is the same in every commit, whether the engine builds it
/// by default on NVIDIA (`default`), was the default (`former`) or is only checked (`extra`).
struct Config {
    name: String,
    role: &'static str,
    source: KernelSource,
}

/// The attention's tile on 16×16 matrices with `FAK_ATTN_PREFILL` unset
/// (`AttnPrefill::chosen_tile`): the largest fitting flash tile, lean, else the staged one.
fn default_tile(head_dim: u32) -> Option<CoopTile> {
    let coop = CoopShape::M16x16;
    CoopTile::fitting_flash(coop, head_dim, LIMIT)
        .map(|tile| tile.with_lean(true).with_pair_k(false).with_ahead(false))
        .or_else(|| CoopTile::fitting(coop, head_dim, LIMIT))
}

/// Qwen3 (head 128; GQA groups 2, 4, 5, 8 across 0.6B–32B), Qwen3.5 (head 256; groups 4 and 6),
/// and a head of 64 (the test models): the default tile of each; every candidate tile at the
/// 8B's and the 27B's shapes.
fn attention() -> Vec<Config> {
    let paths = AttnPrefill::select(NVIDIA);
    let shapes = [
        (64, 2),
        (128, 2),
        (128, 4),
        (128, 5),
        (128, 8),
        (256, 4),
        (256, 6),
    ];
    let mut out = Vec::new();
    for (head_dim, group) in shapes {
        let shape = AttnShape {
            n_head: 4 * group,
            n_kv: 4,
            head_dim,
        };
        let default = default_tile(head_dim);
        let every = [(128, 4), (256, 6)].contains(&(head_dim, group));
        let tiles: Vec<CoopTile> = match every {
            true => CoopTile::candidates(CoopShape::M16x16, head_dim).collect(),
            false => default.into_iter().collect(),
        };
        for tile in tiles {
            out.push(Config {
                name: format!("attn_prefill.hd{head_dim}.g{group}.{}", tile.label()),
                role: if Some(tile) == default {
                    "default"
                } else {
                    "extra"
                },
                source: AttnPrefill::source_for(paths, shape, Some(tile))
                    .expect("a supported tile"),
            });
        }
    }
    out
}

/// The chunked delta rule's coop kernel in every form at the models' key head (128), and the
/// default and former default at the tests' and the largest heads.
fn delta_rule() -> Vec<Config> {
    let paths = GatedDeltaChunked::coop_paths(NVIDIA).expect("NVIDIA has the coop kernel");
    let split = ChunkKernel::named(GDN_SPLIT).expect("the split scan's name");
    let mut out = Vec::new();
    for dk in [16, 32, 64, 128, 256] {
        let dims = DeltaDims {
            dk,
            dv: dk,
            ..DeltaDims::QWEN35_27B
        };
        let split_fits = GatedDeltaChunked::coop_workgroup_bytes(dk, split.form) <= LIMIT;
        let forms: Vec<ChunkKernel> = match dk {
            128 => ChunkKernel::every().filter(|k| k.coop).collect(),
            _ => [GDN_SPLIT, GDN_UNSPLIT]
                .map(|name| ChunkKernel::named(name).unwrap())
                .to_vec(),
        };
        for kernel in forms {
            let label = kernel.label();
            // Where the split scan fits, HEAD runs it and 5f3b821 ran the unsplit one.
            let role = match label.as_str() {
                GDN_SPLIT if split_fits => "default",
                GDN_UNSPLIT if split_fits => "former",
                GDN_UNSPLIT => "default",
                _ => "extra",
            };
            if GatedDeltaChunked::coop_workgroup_bytes(dk, kernel.form) > LIMIT {
                continue;
            }
            out.push(Config {
                name: format!("gated_delta_chunk.dk{dk}.{label}"),
                role,
                source: GatedDeltaChunked::source_with(paths, &dims, kernel.form),
            });
        }
    }
    out
}

/// The mat-mul's default x16 kernel, and every other coop kernel the tests build.
fn matmul() -> Vec<Config> {
    let paths = Matmul::select(NVIDIA);
    let default = CoopKernel::for_shape(CoopShape::M16x16);
    CoopKernel::every()
        .into_iter()
        .filter(|kernel| kernel.supports(CoopShape::M16x16))
        .map(|kernel| Config {
            name: format!("matmul.{kernel}"),
            role: if kernel == default {
                "default"
            } else {
                "extra"
            },
            source: Matmul::source_for(paths, kernel),
        })
        .collect()
}

/// `config.name`, the entry point and the override constants: the same string in every commit
/// for the same pipeline.
fn pipeline_name(config: &Config, spec: &PipelineSpec) -> String {
    let mut constants = spec.constants.clone();
    constants.sort_by(|a, b| a.0.cmp(b.0));
    let mut name = format!("{}.{}", config.name, spec.entry_point);
    for (key, value) in constants {
        let _ = write!(name, ".{key}={value}");
    }
    name.replace(['/', ' '], "_")
}

/// SPIR-V of one pipeline: the module validated with every capability, its overrides applied
/// (naga's `process_overrides`, as wgpu does), written for its entry point alone, with the writer
/// options of tests/portability.rs's `to_spirv` (this file is copied into a checkout as an engine
/// example, so it cannot call the test crate's).
fn to_spirv(module: &naga::Module, spec: &PipelineSpec) -> Result<Vec<u32>, String> {
    let info = Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(module)
        .map_err(|e| format!("{e:?}"))?;
    let constants = spec.constants.iter().map(|&(k, v)| (k.to_string(), v));
    let entry = Some((naga::ShaderStage::Compute, spec.entry_point));
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        module,
        &info,
        entry,
        &constants.collect(),
    )
    .map_err(|e| format!("overrides: {e}"))?;
    let options = spv::Options {
        lang_version: (1, 6),
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        ..spv::Options::default()
    };
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: spec.entry_point.to_string(),
    };
    spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| format!("SPIR-V: {e}"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = Path::new(args.get(1).expect("usage: spvdump OUT_DIR [PATCHED_DIR]"));
    let patched = args.get(2).map(Path::new);
    std::fs::create_dir_all(out).expect("the output folder");
    let mut manifest = String::new();
    let mut failures = 0;
    for config in attention().into_iter().chain(delta_rule()).chain(matmul()) {
        let wgsl = format!("{}.wgsl", config.name);
        let text = match patched.map(|dir| dir.join(&wgsl)).filter(|p| p.exists()) {
            Some(path) => std::fs::read_to_string(path).expect("a patched module"),
            None => config.source.module.text(),
        };
        std::fs::write(out.join(&wgsl), &text).expect("write");
        let module = naga::front::wgsl::parse_str(&text).expect("the module parses");
        for spec in &config.source.pipelines {
            let name = pipeline_name(&config, spec);
            match to_spirv(&module, spec) {
                Ok(words) => {
                    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                    std::fs::write(out.join(format!("{name}.spv")), bytes).expect("write");
                    let _ = writeln!(manifest, "{name}\t{}\t{}", config.role, config.name);
                }
                Err(e) => {
                    eprintln!("{name}: {e}");
                    failures += 1;
                }
            }
        }
    }
    std::fs::write(out.join("manifest.tsv"), manifest).expect("write");
    assert_eq!(failures, 0, "pipelines that did not translate");
}
