//! Kernel building blocks: WGSL files embedded at build time, modules composed from them by
//! concatenation, the [`Kernel`] trait every wrapper implements, and pipeline creation with
//! runtime checks off.

use super::context::GpuContext;
use super::error::GpuError;
use super::facts::feature_names;
use super::layout::Slot;
use super::paths::{Axes, KernelPaths};
use std::collections::HashMap;
use std::sync::Mutex;

/// One file of `wgsl/`, embedded in the binary.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WgslFile {
    pub name: &'static str,
    pub text: &'static str,
}

macro_rules! wgsl_file {
    ($name:literal) => {
        WgslFile {
            name: $name,
            text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../wgsl/", $name)),
        }
    };
}

/// The WGSL files. Helpers state what they require and provide in their header.
pub mod wgsl {
    use super::WgslFile;
    use crate::gpu::paths::KernelPaths;

    /// Byte-addressed loads from `array<u32>` (needs the kernel's `fn src_word`).
    pub const BYTES: WgslFile = wgsl_file!("bytes.wgsl");
    /// GGUF block decoders (needs BYTES).
    pub const BLOCKS: WgslFile = wgsl_file!("blocks.wgsl");
    /// The decoder of the ggml type a pipeline is specialised for (needs BLOCKS).
    pub const DEQUANT_TYPE: WgslFile = wgsl_file!("dequant_type.wgsl");
    /// Flat workgroup index on a 2-D grid.
    pub const GRID: WgslFile = wgsl_file!("grid.wgsl");
    pub const REDUCE_SUBGROUP: WgslFile = wgsl_file!("reduce_subgroup.wgsl");
    pub const REDUCE_WORKGROUP: WgslFile = wgsl_file!("reduce_workgroup.wgsl");
    pub const DEQUANT: WgslFile = wgsl_file!("dequant.wgsl");
    /// Byte lanes of a u32 as exact floats, without int→float conversions.
    pub const BYTE_FLOATS: WgslFile = wgsl_file!("byte_floats.wgsl");
    pub const REDUCE_ROWS_SUBGROUP: WgslFile = wgsl_file!("reduce_rows_subgroup.wgsl");
    pub const REDUCE_ROWS_WORKGROUP: WgslFile = wgsl_file!("reduce_rows_workgroup.wgsl");
    pub const MATVEC: WgslFile = wgsl_file!("matvec.wgsl");
    /// The integer mat-vec over 8-bit inputs (appended to MATVEC in its int-dot variants).
    pub const MATVEC_Q8: WgslFile = wgsl_file!("matvec_q8.wgsl");
    /// The integer mat-vec's wide form (64-element units of Q4_K/Q6_K; appended after MATVEC_Q8).
    pub const MATVEC_Q8_WIDE: WgslFile = wgsl_file!("matvec_q8_wide.wgsl");
    /// The wide form's loop over input vectors in the batched form (appended after
    /// MATVEC_Q8_WIDE, whose loop calls it under BATCHED).
    pub const MATVEC_Q8_BATCHED: WgslFile = wgsl_file!("matvec_q8_batched.wgsl");
    /// The rounding of one 32-element block to 8-bit codes (QUANTIZE_Q8, and the outputs that
    /// MATVEC, GDN_DECODE and ATTN_DECODE write as q8 blocks).
    pub const Q8_BLOCK: WgslFile = wgsl_file!("q8_block.wgsl");
    /// One lane's strided share of a row's sum of squares, its loads batched (the norms:
    /// QUANTIZE_Q8, rms_norm, the x16 mat-mul's folded norm).
    pub const STRIDED_SQUARES: WgslFile = wgsl_file!("strided_squares.wgsl");
    /// f32 vectors (optionally RMS-normed) to the 8-bit blocks MATVEC_Q8 reads.
    pub const QUANTIZE_Q8: WgslFile = wgsl_file!("quantize_q8.wgsl");
    pub const EMBED: WgslFile = wgsl_file!("embed.wgsl");
    /// The per-step uniform struct (`gpu::step`).
    pub const STEP: WgslFile = wgsl_file!("step.wgsl");
    /// Mat-mul bindings, parameters and tile loaders, shared by every mat-mul variant.
    pub const MATMUL_LOAD: WgslFile = wgsl_file!("matmul_load.wgsl");
    /// The mat-mul weight binding as u32 words (matmul.wgsl, matmul_coop.wgsl).
    pub const MATMUL_WORDS: WgslFile = wgsl_file!("matmul_words.wgsl");
    /// The cooperative-matrix mat-muls' staged result store.
    pub const MATMUL_COOP_OUT: WgslFile = wgsl_file!("matmul_coop_out.wgsl");
    /// Cooperative-matrix mat-mul reading X converted to f16 once per product.
    pub const MATMUL_X16: WgslFile = wgsl_file!("matmul_x16.wgsl");
    /// Split-K for every mat-mul variant: K slices, partial sums and their reduction.
    pub const MATMUL_SPLIT: WgslFile = wgsl_file!("matmul_split.wgsl");
    /// Register-tiled mat-mul (f32 tiles).
    pub const MATMUL: WgslFile = wgsl_file!("matmul.wgsl");
    /// Cooperative-matrix mat-mul (its shape from MATMUL_COOP8 or MATMUL_COOP16).
    pub const MATMUL_COOP: WgslFile = wgsl_file!("matmul_coop.wgsl");
    pub const MATMUL_COOP8: WgslFile = wgsl_file!("matmul_coop8.wgsl");
    pub const MATMUL_COOP16: WgslFile = wgsl_file!("matmul_coop16.wgsl");
    /// Streaming read (the bandwidth probe).
    pub const READ_PROBE: WgslFile = wgsl_file!("read_probe.wgsl");

    /// The workgroup reduction for a variant: subgroup operations where the variant has them.
    pub fn reduction(variant: KernelPaths) -> WgslFile {
        if variant.subgroup {
            REDUCE_SUBGROUP
        } else {
            REDUCE_WORKGROUP
        }
    }

    /// The per-output reduction of several partial sums for a variant (`sum_rows`); needs the
    /// file [`reduction`] gives (its `struct Lanes`).
    pub fn row_reduction(variant: KernelPaths) -> WgslFile {
        if variant.subgroup {
            REDUCE_ROWS_SUBGROUP
        } else {
            REDUCE_ROWS_WORKGROUP
        }
    }
}

/// A shader module's WGSL: the enable directives its variant needs, the `u32` constants it is
/// specialised with, then its files in order (helpers first, the kernel last). Nothing else is
/// templated: variants differ in which files are concatenated, in these constants (where a value
/// sizes a function-local array, which an `override` cannot) and in `override` constants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslModule {
    pub variant: KernelPaths,
    pub consts: Vec<(&'static str, u32)>,
    pub files: Vec<WgslFile>,
}

impl WgslModule {
    pub fn new(variant: KernelPaths) -> Self {
        WgslModule {
            variant,
            consts: Vec::new(),
            files: Vec::new(),
        }
    }

    pub fn with(mut self, file: WgslFile) -> Self {
        self.files.push(file);
        self
    }

    /// Declares `const name: u32 = value;` at the top of the module.
    pub fn with_const(mut self, name: &'static str, value: u32) -> Self {
        self.consts.push((name, value));
        self
    }

    /// The module text. Each file is preceded by a `// ---- wgsl/<name>` marker so that naga's
    /// error locations can be traced back to a file.
    pub fn text(&self) -> String {
        let mut text = String::new();
        if self.variant.f16 {
            text.push_str("enable f16;\n");
        }
        if self.variant.coop_matrix.is_some() {
            text.push_str("enable wgpu_cooperative_matrix;\n");
        }
        if !self.consts.is_empty() {
            text.push_str("// ---- specialisation\n");
        }
        for (name, value) in &self.consts {
            text.push_str(&format!("const {name}: u32 = {value}u;\n"));
        }
        for file in &self.files {
            text.push_str("// ---- wgsl/");
            text.push_str(file.name);
            text.push('\n');
            text.push_str(file.text);
            if !file.text.ends_with('\n') {
                text.push('\n');
            }
        }
        text
    }
}

/// One pipeline of a module: an entry point specialised by `override` constants.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineSpec {
    /// A label naming what this pipeline is for (`dequant Q4_K`).
    pub label: String,
    pub entry_point: &'static str,
    pub constants: Vec<(&'static str, f64)>,
}

/// Everything needed to build one kernel variant: its module, its binding signature (group 0,
/// in binding order) and its pipelines.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelSource {
    pub module: WgslModule,
    pub slots: &'static [Slot],
    pub pipelines: Vec<PipelineSpec>,
}

/// A built kernel variant: the shared bind-group layout its bind groups use and one pipeline per
/// [`PipelineSpec`], in order.
pub struct BuiltKernel {
    pub layout: wgpu::BindGroupLayout,
    pub pipelines: Vec<wgpu::ComputePipeline>,
}

/// What every kernel wrapper declares, so the registry can enumerate and build every variant.
pub trait Kernel {
    /// The op-family name (`dequant`), also the name of its WGSL file.
    const NAME: &'static str;
    /// The variant axes the kernel has.
    const AXES: Axes;
    /// The source of one variant; `variant` is always one of [`Kernel::variants`].
    fn source(variant: KernelPaths) -> KernelSource;

    /// Every variant the kernel has, fallback first: by default every combination of its axes.
    /// A kernel leaves one out where it would not pay (the mat-mul has f16 tiles only on
    /// cooperative matrices, which need f16).
    fn variants() -> Vec<KernelPaths> {
        Self::AXES.variants()
    }

    /// The variant built when `allowed` paths are permitted, one of [`Kernel::variants`]: by
    /// default the fastest its axes allow ([`Axes::select`]).
    fn select(allowed: KernelPaths) -> KernelPaths {
        Self::AXES.select(allowed)
    }
}

/// Where a translated kernel is meant to run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    /// Vulkan (naga → SPIR-V).
    SpirV,
    /// Metal (naga → MSL).
    Msl,
    /// DX12 (naga → HLSL).
    Hlsl,
}

/// One variant of one kernel, as the registry lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelVariant {
    pub kernel: &'static str,
    pub paths: KernelPaths,
    pub source: KernelSource,
}

impl KernelVariant {
    pub fn of<K: Kernel>(variant: KernelPaths) -> KernelVariant {
        KernelVariant {
            kernel: K::NAME,
            paths: variant,
            source: K::source(variant),
        }
    }

    /// Every variant of `K`.
    pub fn all_of<K: Kernel>() -> Vec<KernelVariant> {
        K::variants().into_iter().map(Self::of::<K>).collect()
    }

    /// Whether this variant is meant to run on `target`: 16×16 cooperative matrices are
    /// Vulkan-only (Metal has 8×8 only), 8×8 ones are for Metal, and DX12 has none.
    pub fn meant_for(&self, target: Target) -> bool {
        use super::paths::CoopShape;
        matches!(
            (self.paths.coop_matrix, target),
            (None, _)
                | (Some(CoopShape::M16x16), Target::SpirV)
                | (Some(CoopShape::M8x8), Target::Msl)
        )
    }
}

/// Builds the pipelines of `variant` on the device, against the shared layout of its slots; on
/// a shared device (`ContextOptions::shared`) a pipeline built before from the same module text,
/// slots, entry point and constants is taken from its [`PipelineCache`] instead.
///
/// The module is created with `create_shader_module_trusted(.., ShaderRuntimeChecks::unchecked())`
/// and the pipelines with `zero_initialize_workgroup_memory: false`: no bounds clamps, loop
/// counters or zero-fills are injected (on Metal the checked path clamps every storage index);
/// correctness comes from the tests. Validation errors come back as [`GpuError::Shader`].
pub fn build(ctx: &GpuContext, variant: &KernelVariant) -> Result<BuiltKernel, GpuError> {
    let missing = ctx.missing_features(variant.paths);
    if !missing.is_empty() {
        return Err(GpuError::PathUnavailable {
            kernel: variant.kernel,
            paths: variant.paths,
            missing: feature_names(missing).join(", "),
        });
    }
    let (layout, pipeline_layout) = ctx.layouts(variant.source.slots);
    let text = variant.source.module.text();
    let cache = ctx.pipeline_cache();
    let mut pipelines = match cache {
        Some(cache) => cache.get(&text, &variant.source),
        None => vec![None; variant.source.pipelines.len()],
    };
    let unbuilt: Vec<&PipelineSpec> = (variant.source.pipelines.iter())
        .zip(&pipelines)
        .filter_map(|(spec, cached)| cached.is_none().then_some(spec))
        .collect();
    if unbuilt.is_empty() {
        return Ok(BuiltKernel {
            layout,
            pipelines: pipelines.into_iter().flatten().collect(),
        });
    }
    let label = format!("{} ({})", variant.kernel, variant.paths);
    let internal = ctx.device.push_error_scope(wgpu::ErrorFilter::Internal);
    let validation = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
    // SAFETY: kernels guard every index themselves; the GPU tests and the portability test check
    // them on every variant.
    let module = unsafe {
        ctx.device.create_shader_module_trusted(
            wgpu::ShaderModuleDescriptor {
                label: Some(&label),
                source: wgpu::ShaderSource::Wgsl(text.as_str().into()),
            },
            wgpu::ShaderRuntimeChecks::unchecked(),
        )
    };
    let mut built = unbuilt.into_iter().map(|spec| {
        ctx.device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&spec.label),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(spec.entry_point),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &spec.constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            })
    });
    for slot in pipelines.iter_mut().filter(|p| p.is_none()) {
        *slot = built.next();
    }
    let pipelines: Vec<wgpu::ComputePipeline> = pipelines.into_iter().flatten().collect();
    let errors = [validation, internal]
        .map(|scope| pollster::block_on(scope.pop()))
        .into_iter()
        .flatten()
        .map(|e| e.to_string())
        .collect::<Vec<_>>();
    if errors.is_empty() {
        if let Some(cache) = cache {
            cache.insert(text, &variant.source, &pipelines);
        }
        Ok(BuiltKernel { layout, pipelines })
    } else {
        Err(GpuError::Shader {
            kernel: variant.kernel,
            paths: variant.paths,
            message: errors.join("; "),
        })
    }
}

/// The pipelines built on a shared device (`ContextOptions::shared`), by module text and binding
/// signature, then by entry point and constants: what a pipeline compiles from, so one found
/// here is the pipeline a new build would make. A second engine loaded on the device takes its
/// pipelines from here. Only shared devices keep them: a test binary that builds each form once
/// (tests/gpu_matvec.rs: hundreds of distinct mat-vec pipelines) would only hold gigabytes of a
/// software driver's compiled code (lavapipe) for no reuse.
#[derive(Default)]
pub struct PipelineCache {
    modules: Mutex<HashMap<ModuleKey, HashMap<SpecKey, wgpu::ComputePipeline>>>,
}

/// A module's text and binding signature.
type ModuleKey = (String, &'static [Slot]);

/// A pipeline's entry point and constants (their values' bits: f64 is not `Eq`).
type SpecKey = (&'static str, Vec<(&'static str, u64)>);

fn spec_key(spec: &PipelineSpec) -> SpecKey {
    let constants = spec.constants.iter().map(|&(name, v)| (name, v.to_bits()));
    (spec.entry_point, constants.collect())
}

impl PipelineCache {
    /// Per pipeline of `source` (module text `text`), the one built before, if any.
    fn get(&self, text: &str, source: &KernelSource) -> Vec<Option<wgpu::ComputePipeline>> {
        let modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        let built = modules.get(&(text.to_owned(), source.slots));
        let cached = |spec| built.and_then(|b| b.get(&spec_key(spec)).cloned());
        source.pipelines.iter().map(cached).collect()
    }

    /// Keeps `pipelines`, built for `source`'s specs in order.
    fn insert(&self, text: String, source: &KernelSource, pipelines: &[wgpu::ComputePipeline]) {
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        let built = modules.entry((text, source.slots)).or_default();
        for (spec, pipeline) in source.pipelines.iter().zip(pipelines) {
            built.insert(spec_key(spec), pipeline.clone());
        }
    }
}
