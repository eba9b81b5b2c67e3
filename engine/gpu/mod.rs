//! The GPU layer: the wgpu context, buffers, and one typed wrapper per WGSL kernel.
//!
//! # The context
//!
//! [`GpuContext::from_env`] picks the best adapter (discrete > integrated > virtual > CPU;
//! `FAK_ADAPTER=<name substring>` and `WGPU_BACKEND=vulkan|metal|dx12|gl` override) and opens a
//! device with the adapter's full limits and every optional feature it has (SHADER_F16, SUBGROUP,
//! IMMEDIATES, TIMESTAMP_QUERY(+INSIDE_PASSES), PIPELINE_CACHE, EXPERIMENTAL_COOPERATIVE_MATRIX
//! unless `FAK_COOP_MATRIX=0`; see [`ContextOptions::cooperative_matrix`] for which shapes).
//! [`AdapterFacts`] is the serialisable description of the adapter.
//!
//! # Paths and variants
//!
//! A kernel that uses subgroups, f16 or cooperative matrices also has a variant that does not.
//! [`KernelPaths`] says which fast paths are allowed: [`GpuContext::paths`] is the best the
//! device has minus what `FAK_FORCE` switches off, [`GpuContext::runnable_paths`] lists every
//! combination the device can run (tests iterate it, so every fallback is tested on an adapter
//! that has the fast path too). Each kernel declares its [`Axes`] and keeps only those
//! ([`Axes::select`]).
//!
//! # Writing a kernel
//!
//! 1. **WGSL** in `wgsl/<op>.wgsl`, one op family per file, opening with the math, the bindings
//!    and the dispatch shape. Specialise with `override` constants (workgroup size, rows per
//!    workgroup, the ggml type), never text templates. Read GGUF weights as `array<u32>` through
//!    the shared helpers, which a kernel gets by *concatenation* ([`WgslModule`]):
//!    - `bytes.wgsl`: byte-addressed loads (unaligned blocks of 18/22/34/210 bytes); the kernel
//!      provides `fn src_word(index: u32) -> u32` reading its own binding;
//!    - `blocks.wgsl`: `dequant4_<type>(block_byte, e)` / `dequant1_<type>(base, i)` and the field
//!      decoders (`load_f16_at`, `k_scale_min`, `low_nibbles4`, `high_bits4`) for every type;
//!    - `reduce_subgroup.wgsl` | `reduce_workgroup.wgsl` ([`wgsl::reduction`]): the same
//!      `struct Lanes` + `workgroup_sum(v, lanes)`; the entry point takes `lanes: Lanes` as an
//!      argument, so the kernel text is identical for both variants;
//!    - `grid.wgsl`: `flat_workgroup(id, count)` for 2-D dispatch grids.
//!
//!    Helpers declare what they require and provide in their header; `enable f16;` and
//!    `enable wgpu_cooperative_matrix;` are added by [`WgslModule::text`] from the variant.
//! 2. **One wrapper struct** in `gpu/kernels/<op>.rs` owning its pipelines, implementing
//!    [`Kernel`] (`NAME`, `AXES`, `source(variant)` = the module's files and one [`PipelineSpec`]
//!    per pipeline, and the binding signature as [`Slot`]s). `new(ctx, paths)` selects the
//!    variant and calls [`build`], which creates the module with
//!    `create_shader_module_trusted(.., ShaderRuntimeChecks::unchecked())` and the pipelines with
//!    `zero_initialize_workgroup_memory: false` against the shared layout of its slots
//!    ([`GpuContext::layouts`]: explicit, keyed by the signature, so a bind group works for
//!    every variant and every kernel with the same signature). A `bind(..)` method checks shapes
//!    and buffer sizes, splits tensors larger than one binding into row ranges ([`split_rows`],
//!    [`Window`]: aligned binding offsets, the remainder passed as a byte/element offset), and
//!    builds the bind groups once at load time; `encode(pass, binding)` only records dispatches,
//!    on a [`Grid`] that wraps into a second dimension past 65535 workgroups.
//! 3. **Register** it in [`registry`]: the portability test translates every variant to SPIR-V,
//!    MSL and HLSL (where each is meant to run), and `harness selftest` will run them.
//! 4. **Test** it in `tests/gpu_<op>.rs` against the CPU reference over every variant the
//!    device can run (`fak_tests::variants::<K>`), seeded inputs, NaN-poisoned outputs and
//!    `assert_close` with the tolerance's reason beside it (see `tests/common`).
//!
//! An f16 variant is written like a subgroup one (the module gets `enable f16;`). naga 30
//! mistranslates `bitcast<vec2<f16>>(u32)`, so GGUF f16 fields are decoded with
//! `unpack2x16float` on every path (experiments/NOTES.md); f16 is used where values are stored
//! as f16, as in the mat-mul's cooperative-matrix tiles. A kernel may leave out a combination
//! of its axes that would not pay ([`Kernel::variants`], [`Kernel::select`]).

pub mod activations;
pub mod buffers;
pub mod context;
pub mod error;
pub mod facts;
pub mod kernel;
pub mod kernels;
pub mod layout;
pub mod memory;
pub mod paths;
pub mod profile;
pub mod step;

pub use activations::Activations;
pub use buffers::{
    Grid, Window, fill_f32, read_back, read_back_f32, split_rows, storage_buffer, uniform, upload,
    write,
};
pub use context::{ContextOptions, GpuContext, int_dot_pays, skip_display_probe};
pub use error::GpuError;
pub use facts::{AdapterFacts, CoopMatrixConfig, KeyLimits};
pub use kernel::{
    BuiltKernel, Kernel, KernelSource, KernelVariant, PipelineSpec, Target, WgslFile, WgslModule,
    build, wgsl,
};
pub use kernels::registry;
pub use layout::Slot;
pub use paths::{Axes, CoopShape, Forced, KernelPaths};
pub use step::{Step, StepBuffer};
