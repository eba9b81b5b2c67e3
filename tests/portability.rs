//! Every kernel variant translates with naga for the backends it is meant for: SPIR-V 1.6
//! (validated by naga with the capabilities the variant's features give at runtime, then by
//! `spirv-val --target-env vulkan1.3`), MSL 3.1 for the Metal variants and HLSL (SM 6.2) where its
//! features exist there. The recipe is wgpu-notes.md §5.

use fak::gpu::kernels::attn_decode::AttnShape;
use fak::gpu::kernels::attn_prefill::{AttnPrefill, CoopTile};
use fak::gpu::kernels::delta_state::DeltaDims;
use fak::gpu::kernels::gated_delta_chunk::{ChunkForm, GatedDeltaChunked};
use fak::gpu::kernels::matmul::{CoopKernel, Matmul};
use fak::gpu::{Kernel, KernelVariant, PipelineSpec, Target, registry};
use fak_tests::reduce_probe::ReduceProbe;
use naga::back::{hlsl, msl, spv};
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};
use std::io::Write;
use std::process::{Command, Stdio};

/// The engine's kernels plus the test-only kernels that exercise shared helpers.
fn all_variants() -> Vec<KernelVariant> {
    let mut all = registry();
    all.extend(KernelVariant::all_of::<ReduceProbe>());
    all
}

/// The cooperative-matrix prefill attention with every workgroup tile the tests and the engine
/// build (each row-block count × key step, the rescale-always slack, key runs) on the example shape and the models'
/// heads (Qwen3-8B: 32 q heads of 128 on 8 kv heads; Qwen3.5-27B: 24 of 256 on 4, two subgroups
/// a row block).
fn coop_attention_tiles() -> Vec<KernelVariant> {
    let shapes = [
        AttnShape::EXAMPLE,
        AttnShape {
            n_head: 32,
            n_kv: 8,
            head_dim: 128,
        },
        AttnShape {
            n_head: 24,
            n_kv: 4,
            head_dim: 256,
        },
    ];
    let mut out = Vec::new();
    for variant in KernelVariant::all_of::<AttnPrefill>() {
        let Some(coop) = variant.paths.coop_matrix else {
            continue;
        };
        for shape in shapes {
            for tile in CoopTile::candidates(coop, shape.head_dim) {
                for (slack, runs) in [
                    (CoopTile::SLACK, false),
                    (0, false),
                    (CoopTile::SLACK, true),
                ] {
                    let tile = tile.with_slack(slack).with_runs(runs);
                    out.push(KernelVariant {
                        kernel: AttnPrefill::NAME,
                        paths: variant.paths,
                        source: AttnPrefill::source_for(variant.paths, shape, Some(tile)).unwrap(),
                    });
                }
            }
        }
    }
    out
}

/// The cooperative-matrix chunked delta rule at the key head sizes the tests and models run
/// beside the registry's 128: 16 and 32 (a subgroup with no state tile of its own stores into
/// the junk tile) and 256 (the most workgroup memory), each in every [`ChunkForm`] (at 128 the
/// forms the registry's default is not).
fn coop_delta_rule_heads() -> Vec<KernelVariant> {
    let mut out = Vec::new();
    for variant in KernelVariant::all_of::<GatedDeltaChunked>() {
        if variant.paths.coop_matrix.is_none() {
            continue;
        }
        for dk in [16, 32, 128, 256] {
            let dims = DeltaDims {
                dk,
                dv: dk,
                ..DeltaDims::QWEN35_27B
            };
            // The registry has the default form at 128.
            let forms = ChunkForm::COOP
                .into_iter()
                .filter(|f| dk != 128 || *f != ChunkForm::default());
            for form in forms {
                out.push(KernelVariant {
                    kernel: GatedDeltaChunked::NAME,
                    paths: variant.paths,
                    source: GatedDeltaChunked::source_with(variant.paths, &dims, form),
                });
            }
        }
    }
    out
}

/// The cooperative-matrix mat-mul with each kernel the tests and matmul-bench --sweep build but
/// the registry's, so one that the device would build fails here rather than there.
fn coop_matmul_tilings() -> Vec<KernelVariant> {
    let mut out = Vec::new();
    for variant in KernelVariant::all_of::<Matmul>() {
        let Some(shape) = variant.paths.coop_matrix else {
            continue;
        };
        for tiling in CoopKernel::every() {
            if tiling != CoopKernel::for_shape(shape) && tiling.supports(shape) {
                out.push(KernelVariant {
                    kernel: Matmul::NAME,
                    paths: variant.paths,
                    source: Matmul::source_for(variant.paths, tiling),
                });
            }
        }
    }
    out
}

/// The naga capabilities wgpu validates with on a device that has exactly these features (and,
/// like every Vulkan, Metal and DX12 device, all downlevel flags: `unpack2x16float` needs
/// SHADER_F16_IN_F32 from them).
fn capabilities(features: wgpu::Features) -> Capabilities {
    wgpu_naga_bridge::features_to_naga_capabilities(features, wgpu::DownlevelFlags::compliant())
}

fn parse(variant: &KernelVariant) -> Result<naga::Module, String> {
    let text = variant.source.module.text();
    naga::front::wgsl::parse_str(&text).map_err(|e| e.emit_to_string(&text))
}

fn validate(
    variant: &KernelVariant,
    module: &naga::Module,
    caps: Capabilities,
) -> Result<ModuleInfo, String> {
    let text = variant.source.module.text();
    Validator::new(ValidationFlags::all(), caps)
        .validate(module)
        .map_err(|e| e.emit_to_string(&text))
}

/// The module with this pipeline's override constants applied, as wgpu does before any backend.
fn specialise(
    module: &naga::Module,
    info: &ModuleInfo,
    spec: &PipelineSpec,
) -> Result<(naga::Module, ModuleInfo), String> {
    let mut constants = naga::back::PipelineConstants::default();
    for &(name, value) in &spec.constants {
        constants.insert(name.to_string(), value);
    }
    let entry = Some((naga::ShaderStage::Compute, spec.entry_point));
    naga::back::pipeline_constants::process_overrides(module, info, entry, &constants)
        .map(|(m, i)| (m.into_owned(), i.into_owned()))
        .map_err(|e| format!("overrides: {e}"))
}

fn to_spirv(
    module: &naga::Module,
    info: &ModuleInfo,
    spec: &PipelineSpec,
) -> Result<Vec<u32>, String> {
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
    spv::write_vec(module, info, &options, Some(&pipeline)).map_err(|e| format!("SPIR-V: {e}"))
}

fn spirv_val(words: &[u32]) -> Result<(), String> {
    let mut child = Command::new("spirv-val")
        .args(["--target-env", "vulkan1.3", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running spirv-val (Debian package spirv-tools): {e}"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(bytemuck::cast_slice(words))
        .map_err(|e| format!("feeding spirv-val: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("spirv-val: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "spirv-val: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// MSL as wgpu's Metal backend writes it for a trusted module on macOS 14 (wgpu-notes.md §5).
fn to_msl(module: &naga::Module, info: &ModuleInfo, spec: &PipelineSpec) -> Result<String, String> {
    let options = msl::Options {
        lang_version: (3, 1),
        fake_missing_bindings: true,
        zero_initialize_workgroup_memory: false,
        force_loop_bounding: false,
        emit_int_div_checks: false,
        ..msl::Options::default()
    };
    let pipeline = msl::PipelineOptions {
        entry_point: Some((naga::ShaderStage::Compute, spec.entry_point.to_string())),
        ..msl::PipelineOptions::default()
    };
    msl::write_string(module, info, &options, &pipeline)
        .map(|(text, _)| text)
        .map_err(|e| format!("MSL: {e}"))
}

fn to_hlsl(
    module: &naga::Module,
    info: &ModuleInfo,
    spec: &PipelineSpec,
) -> Result<String, String> {
    let target = |register| hlsl::BindTarget {
        space: 0,
        register,
        binding_array_size: None,
        dynamic_storage_buffer_offsets_index: None,
        restrict_indexing: false,
    };
    let options = hlsl::Options {
        shader_model: hlsl::ShaderModel::V6_2,
        fake_missing_bindings: true,
        // Without these targets the writer panics on immediates / num_workgroups.
        immediates_target: Some(target(0)),
        special_constants_binding: Some(target(1)),
        zero_initialize_workgroup_memory: false,
        restrict_indexing: false,
        force_loop_bounding: false,
        ..hlsl::Options::default()
    };
    let pipeline = hlsl::PipelineOptions {
        entry_point: Some((naga::ShaderStage::Compute, spec.entry_point.to_string())),
    };
    let mut out = String::new();
    hlsl::Writer::new(&mut out, &options, &pipeline)
        .write(module, info, None)
        .map_err(|e| format!("HLSL: {e}"))?;
    Ok(out)
}

/// `FAK_PORTABILITY_DUMP=<dir>` keeps every translation there, for reading what naga emitted.
fn dump(variant: &KernelVariant, spec: &PipelineSpec, extension: &str, bytes: &[u8]) {
    if let Some(dir) = std::env::var_os("FAK_PORTABILITY_DUMP") {
        let name = format!(
            "{} {} {}.{extension}",
            variant.kernel, variant.paths, spec.label
        )
        .replace([' ', '/', '='], "_");
        std::fs::create_dir_all(&dir).expect("dump dir");
        std::fs::write(std::path::Path::new(&dir).join(name), bytes).expect("dump");
    }
}

/// Translates one pipeline of a validated variant for every target it is meant for; returns the
/// targets it was translated to.
fn translate(
    variant: &KernelVariant,
    module: &naga::Module,
    info: &ModuleInfo,
    spec: &PipelineSpec,
) -> Result<Vec<Target>, String> {
    let (module, info) = specialise(module, info, spec)?;
    let words = to_spirv(&module, &info, spec)?;
    dump(variant, spec, "spv", bytemuck::cast_slice(&words));
    // Debian's spirv-val (2023.1) cannot parse CooperativeMatrixKHR (wgpu-notes.md §1b).
    if variant.paths.coop_matrix.is_none() {
        spirv_val(&words)?;
    }
    let mut targets = vec![Target::SpirV];
    if variant.meant_for(Target::Msl) {
        dump(
            variant,
            spec,
            "metal",
            to_msl(&module, &info, spec)?.as_bytes(),
        );
        targets.push(Target::Msl);
    }
    if variant.meant_for(Target::Hlsl) {
        dump(
            variant,
            spec,
            "hlsl",
            to_hlsl(&module, &info, spec)?.as_bytes(),
        );
        targets.push(Target::Hlsl);
    }
    Ok(targets)
}

#[test]
fn every_kernel_variant_translates_for_the_backends_it_is_meant_for() {
    let mut failures = Vec::new();
    let mut translated = Vec::new();
    let extra = coop_attention_tiles()
        .into_iter()
        .chain(coop_matmul_tilings())
        .chain(coop_delta_rule_heads());
    for variant in all_variants().into_iter().chain(extra) {
        let name = format!("{} ({})", variant.kernel, variant.paths);
        let caps = capabilities(variant.paths.required_features());
        let checked = parse(&variant).and_then(|m| validate(&variant, &m, caps).map(|i| (m, i)));
        let (module, info) = match checked {
            Ok(ok) => ok,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        for spec in &variant.source.pipelines {
            match translate(&variant, &module, &info, spec) {
                Ok(targets) => translated.extend(targets),
                Err(e) => failures.push(format!("{name} / {}: {e}", spec.label)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let count = |t| translated.iter().filter(|&&x| x == t).count();
    eprintln!(
        "translated {} pipelines to SPIR-V, {} to MSL, {} to HLSL",
        count(Target::SpirV),
        count(Target::Msl),
        count(Target::Hlsl)
    );
    assert!(count(Target::SpirV) > 0, "the registry lists no pipelines");
}

/// A fast variant must really use the feature it is named for: with that one capability taken
/// away, validation fails. (So the fallback and the fast path are different kernels, and the
/// capability set the translation test validates with is not vacuous.)
#[test]
fn each_fast_variant_needs_the_feature_it_is_named_for() {
    for variant in all_variants() {
        let module = parse(&variant).unwrap();
        let features = variant.paths.required_features();
        for feature in features.iter() {
            let without = capabilities(features - feature);
            assert!(
                validate(&variant, &module, without).is_err(),
                "{} ({}) validates without {feature:?}",
                variant.kernel,
                variant.paths
            );
        }
    }
}

#[test]
fn registry_lists_each_variant_of_each_kernel_once() {
    let all = all_variants();
    for (i, a) in all.iter().enumerate() {
        assert!(
            !all[i + 1..]
                .iter()
                .any(|b| b.kernel == a.kernel && b.paths == a.paths),
            "{} ({}) listed twice",
            a.kernel,
            a.paths
        );
        assert!(
            !a.source.pipelines.is_empty(),
            "{} has no pipelines",
            a.kernel
        );
    }
    assert!(all.iter().any(|v| v.kernel == "dequant"));
}
