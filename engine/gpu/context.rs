//! The wgpu context: adapter choice, the device with the adapter's full limits and optional
//! features, and the kernel paths it can run.

use super::error::GpuError;
use super::facts::AdapterFacts;
use super::kernel::PipelineCache;
use super::layout::{LayoutCache, Slot};
use super::paths::{CoopShape, Forced, KernelPaths};
use std::sync::{Arc, Mutex};

/// Optional features requested whenever the adapter has them (wgpu-notes.md §0).
const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::IMMEDIATES)
    .union(wgpu::Features::TIMESTAMP_QUERY)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES)
    .union(wgpu::Features::PIPELINE_CACHE);

/// Kernels address bytes inside one binding with u32 arithmetic; 2 GiB leaves headroom for
/// `offset + 4` and matches wgpu's own Vulkan cap (wgpu-notes.md §2).
const MAX_ADDRESSABLE_BINDING: u64 = 1 << 31;

/// How to pick and open the device.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// A case-insensitive substring of the adapter name (`FAK_ADAPTER`); the best adapter if None.
    pub adapter: Option<String>,
    /// Cooperative matrices (`EXPERIMENTAL_COOPERATIVE_MATRIX`, experimental in wgpu 30: a
    /// configuration the driver lacks is undefined behaviour, so only reported ones are used).
    /// `None` (the default, `FAK_COOP_MATRIX` unset): the 16×16 shape where the adapter has it,
    /// the one measured to win (the prefill mat-mul on the H200, experiments/NOTES.md); the 8×8
    /// (Metal) kernel has not run on hardware yet. `Some(true)` (`FAK_COOP_MATRIX=1`): every
    /// shape the adapter has; `Some(false)` (`=0`): none.
    pub cooperative_matrix: Option<bool>,
    /// Fast paths switched off for [`GpuContext::paths`] (`FAK_FORCE`).
    pub forced: Forced,
    /// The integer mat-vec path ([`KernelPaths::int_dot`]: decode inputs quantized to 8-bit
    /// blocks, integer dot products, llama.cpp's CUDA and Vulkan rounding). `None` (the default,
    /// `FAK_INT_DOT` unset): where [`int_dot_pays`] says the adapter runs it faster;
    /// `Some(true)` / `Some(false)` (`FAK_INT_DOT=1` / `=0`): on / off everywhere.
    pub int_dot: Option<bool>,
    /// Open the adapter's device once per process and share it, with its layouts and every
    /// pipeline built on it, among the contexts opened with `shared` on the same adapter and
    /// features (a context owns its device otherwise). For the test binaries, which load an
    /// engine per path and step shape: a software driver (lavapipe) spends up to a second of the
    /// calling thread on each pipeline, and every load built the same ones again.
    pub shared: bool,
}

impl ContextOptions {
    /// Options from `FAK_ADAPTER`, `FAK_COOP_MATRIX`, `FAK_INT_DOT` and `FAK_FORCE`. (`WGPU_BACKEND` is read
    /// when the instance is created.)
    pub fn from_env() -> Result<Self, GpuError> {
        let forced = match std::env::var("FAK_FORCE") {
            Ok(list) => Forced::parse(&list).map_err(GpuError::BadForce)?,
            Err(_) => Forced::default(),
        };
        Ok(ContextOptions {
            adapter: std::env::var("FAK_ADAPTER").ok().filter(|s| !s.is_empty()),
            cooperative_matrix: match std::env::var("FAK_COOP_MATRIX").as_deref() {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            },
            forced,
            int_dot: match std::env::var("FAK_INT_DOT").as_deref() {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            },
            shared: false,
        })
    }
}

/// Whether the integer mat-vec path is the default on this adapter: on Vulkan and DX12 GPUs, not
/// on Metal, GL or CPU adapters. Measured on the H200 (Vulkan, experiments/NOTES.md, session
/// 2026-12-04 #2): decode +20 % on the 27B shape (57.7 → 69.4 tok/s) and +16 % on the 8B (169 →
/// 196), same process order both ways; the GPUs those backends drive have a 4×8-bit dot
/// instruction (NVIDIA DP4A, AMD and Intel's dot4), which is also why llama.cpp's CUDA and Vulkan
/// mat-vecs quantize their inputs to 8 bits. Apple GPUs have none (llama.cpp's Metal mat-vec
/// keeps f32 inputs), and on a CPU adapter naga's polyfill makes the integer path the slower one.
/// `harness selftest` still checks it: where its verdict fails, the harness forces it off.
pub fn int_dot_pays(facts: &AdapterFacts) -> bool {
    matches!(facts.backend.as_str(), "vulkan" | "dx12") && facts.device_type != "cpu"
}

/// An open device and what it can run. Kernels are built against it with a [`KernelPaths`].
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    facts: AdapterFacts,
    /// The fastest paths the device supports, before forcing.
    best: KernelPaths,
    forced: Forced,
    layouts: Arc<LayoutCache>,
    /// The pipelines built so far, where the device is shared (`ContextOptions::shared`).
    pipelines: Option<Arc<PipelineCache>>,
}

/// A device opened with [`ContextOptions::shared`], for the next context asking for the same.
struct SharedDevice {
    adapter: wgpu::AdapterInfo,
    features: wgpu::Features,
    device: wgpu::Device,
    queue: wgpu::Queue,
    layouts: Arc<LayoutCache>,
    pipelines: Arc<PipelineCache>,
}

static SHARED_DEVICES: Mutex<Vec<SharedDevice>> = Mutex::new(Vec::new());

/// The backends fak uses: `WGPU_BACKEND`'s, else the primary ones (Vulkan, Metal, DX12). GL is
/// left out unless asked for, since it has none of the compute features kernels use.
pub fn default_backends() -> wgpu::Backends {
    wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY)
}

/// Keeps Mesa's Vulkan device-select layer from probing for a display server. The layer is
/// implicit (the loader enables it for every instance) and, to put the device driving the
/// user's screen first, connects to Wayland and X11 whenever an instance enables their surface
/// extensions — which wgpu always does where they exist. Without a session, libwayland prints
/// `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` on every adapter
/// enumeration: an "error" line on every successful headless run. fak has no window and ranks
/// adapters itself (`FAK_ADAPTER`, [`ranked_adapters`]), so it turns the layer off through the
/// switch its manifest declares (`disable_environment: NODEVICE_SELECT=1`), unless the user
/// set that switch or chose a device through the layer (`MESA_VK_DEVICE_SELECT`).
///
/// # Safety
/// Sets an environment variable: call it before the process starts any thread (first thing in
/// `main`), as [`std::env::set_var`] requires.
pub unsafe fn skip_display_probe() {
    const SWITCH: &str = "NODEVICE_SELECT";
    if std::env::var_os(SWITCH).is_none() && std::env::var_os("MESA_VK_DEVICE_SELECT").is_none() {
        // SAFETY: the caller guarantees no other thread runs.
        unsafe { std::env::set_var(SWITCH, "1") };
    }
}

/// The process's instance for `backends`: created once and shared by every context opened
/// after. NVIDIA's Vulkan driver (580, H200) stops finding its GPU after ~30 instances have been
/// created in one process, even with every earlier one dropped: `harness selftest` (an engine
/// per model and path) then failed its last 20 loads with "no GPU adapter found", which forced
/// every fast path off for the threeway run that followed (experiments/NOTES.md, session
/// 2026-12-04 #2). Lavapipe shows no growth either way; one instance is what wgpu expects.
fn instance_on(backends: wgpu::Backends) -> wgpu::Instance {
    static INSTANCES: Mutex<Vec<(wgpu::Backends, wgpu::Instance)>> = Mutex::new(Vec::new());
    let mut instances = INSTANCES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, instance)) = instances.iter().find(|(b, _)| *b == backends) {
        return instance.clone();
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends,
        flags: wgpu::InstanceFlags::from_build_config().with_env(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    instances.push((backends, instance.clone()));
    instance
}

/// Every adapter on every backend (`WGPU_BACKEND` still narrows it), best first: what
/// `harness devices` lists.
pub fn all_adapters() -> Vec<wgpu::Adapter> {
    let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all());
    ranked_adapters(&instance_on(backends), backends)
}

/// The adapters of `instance`, best first: discrete > integrated > virtual > CPU, and within a
/// type the native backends before GL.
pub fn ranked_adapters(instance: &wgpu::Instance, backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    let mut adapters = pollster::block_on(instance.enumerate_adapters(backends));
    adapters.sort_by_key(|a| rank(&a.get_info()));
    adapters
}

fn rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let device = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let backend = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        _ => 1,
    };
    (device, backend)
}

/// The index in `ranked` (best first) of the adapter fak uses: the first on `backends` whose name
/// contains `wanted` case-insensitively, or the first on `backends` when `wanted` is None.
pub fn choose(
    ranked: &[wgpu::Adapter],
    wanted: Option<&str>,
    backends: wgpu::Backends,
) -> Result<usize, GpuError> {
    let usable: Vec<usize> = (0..ranked.len())
        .filter(|&i| backends.contains(ranked[i].get_info().backend.into()))
        .collect();
    let Some(&best) = usable.first() else {
        return Err(GpuError::NoAdapter {
            backends: format!("{backends:?}"),
        });
    };
    let Some(wanted) = wanted else {
        return Ok(best);
    };
    let needle = wanted.to_lowercase();
    usable
        .iter()
        .copied()
        .find(|&i| ranked[i].get_info().name.to_lowercase().contains(&needle))
        .ok_or_else(|| GpuError::NoMatchingAdapter {
            wanted: wanted.to_string(),
            available: usable
                .iter()
                .map(|&i| {
                    let info = ranked[i].get_info();
                    format!("{} ({}, {:?})", info.name, info.backend, info.device_type)
                })
                .collect(),
        })
}

impl GpuContext {
    /// Opens the device that `FAK_ADAPTER` / `WGPU_BACKEND` / `FAK_COOP_MATRIX` / `FAK_FORCE` ask
    /// for.
    pub fn from_env() -> Result<Self, GpuError> {
        Self::new(&ContextOptions::from_env()?)
    }

    pub fn new(options: &ContextOptions) -> Result<Self, GpuError> {
        let backends = default_backends();
        let adapters = ranked_adapters(&instance_on(backends), backends);
        let chosen = choose(&adapters, options.adapter.as_deref(), backends)?;
        Self::open(&adapters[chosen], options)
    }

    /// Opens a device on `adapter` with its full limits and every optional feature it has.
    pub fn open(adapter: &wgpu::Adapter, options: &ContextOptions) -> Result<Self, GpuError> {
        let facts = AdapterFacts::of(adapter);
        let mut wanted = OPTIONAL_FEATURES;
        if options.cooperative_matrix != Some(false) {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        let features = adapter.features() & wanted;
        let experimental = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: only cooperative-matrix kernels use the experimental feature, and they run
            // only with a configuration the adapter reported (`coop_shapes`).
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let descriptor = wgpu::DeviceDescriptor {
            label: Some("fak"),
            required_features: features,
            required_limits: adapter.limits(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let request = || {
            pollster::block_on(adapter.request_device(&descriptor)).map_err(|source| {
                GpuError::RequestDevice {
                    adapter: facts.name.clone(),
                    source,
                }
            })
        };
        let (device, queue, layouts, pipelines) = match options.shared {
            true => {
                let mut shared = SHARED_DEVICES.lock().unwrap_or_else(|e| e.into_inner());
                let info = adapter.get_info();
                let found = shared
                    .iter()
                    .position(|d| d.adapter == info && d.features == features);
                let d = match found {
                    Some(i) => &shared[i],
                    None => {
                        let (device, queue) = request()?;
                        shared.push(SharedDevice {
                            adapter: info,
                            features,
                            device,
                            queue,
                            layouts: Arc::default(),
                            pipelines: Arc::default(),
                        });
                        &shared[shared.len() - 1]
                    }
                };
                let (device, queue) = (d.device.clone(), d.queue.clone());
                (device, queue, d.layouts.clone(), Some(d.pipelines.clone()))
            }
            false => {
                let (device, queue) = request()?;
                (device, queue, Arc::default(), None)
            }
        };
        let best = KernelPaths {
            subgroup: features.contains(wgpu::Features::SUBGROUP),
            f16: features.contains(wgpu::Features::SHADER_F16),
            coop_matrix: coop_shapes(&facts, features).into_iter().rfind(|&shape| {
                options.cooperative_matrix == Some(true) || shape == CoopShape::M16x16
            }),
            int_dot: options.int_dot.unwrap_or_else(|| int_dot_pays(&facts)),
        };
        Ok(GpuContext {
            device,
            queue,
            facts,
            best,
            forced: options.forced,
            layouts,
            pipelines,
        })
    }

    pub fn facts(&self) -> &AdapterFacts {
        &self.facts
    }

    /// The paths kernels should be built with: the fastest the device has, minus forced ones.
    pub fn paths(&self) -> KernelPaths {
        self.best.without(self.forced)
    }

    /// Every combination of paths this device can run, fallback first (forcing and opting in
    /// ignored: the integer path runs everywhere): tests run each kernel over all of them.
    pub fn runnable_paths(&self) -> Vec<KernelPaths> {
        let features = self.device.features();
        let mut out = Vec::new();
        for subgroup in [false, true] {
            for f16 in [false, true] {
                let base = KernelPaths {
                    subgroup,
                    f16,
                    ..KernelPaths::FALLBACK
                };
                if !features.contains(base.required_features()) {
                    continue;
                }
                out.push(base);
                if f16 {
                    for shape in coop_shapes(&self.facts, features) {
                        out.push(KernelPaths {
                            coop_matrix: Some(shape),
                            ..base
                        });
                    }
                }
            }
        }
        let int_dot = out.iter().map(|&p| KernelPaths { int_dot: true, ..p });
        out.extend(int_dot.collect::<Vec<_>>());
        out
    }

    /// The device features `paths` needs that this device lacks (empty when it can run them).
    pub fn missing_features(&self, paths: KernelPaths) -> wgpu::Features {
        paths.required_features() - self.device.features()
    }

    /// The largest storage binding a kernel may address: the device limit, capped at 2 GiB for
    /// u32 byte offsets, in whole words.
    pub fn max_binding_size(&self) -> u64 {
        let limit = self.device.limits().max_storage_buffer_binding_size;
        limit.min(MAX_ADDRESSABLE_BINDING) & !3
    }

    /// The alignment of a storage binding's offset (at least 4).
    pub fn binding_alignment(&self) -> u64 {
        u64::from(self.device.limits().min_storage_buffer_offset_alignment).max(4)
    }

    /// The shared bind-group and pipeline layouts for a binding signature.
    pub fn layouts(&self, slots: &[Slot]) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        self.layouts.get(&self.device, slots)
    }

    /// The pipelines built on this device so far where it is shared ([`ContextOptions::shared`]:
    /// [`crate::gpu::kernel::build`] takes from them).
    pub(crate) fn pipeline_cache(&self) -> Option<&PipelineCache> {
        self.pipelines.as_deref()
    }

    /// Records one compute pass with `record`, submits it and waits for it to finish.
    pub fn run_pass(
        &self,
        label: &str,
        record: impl FnOnce(&mut wgpu::ComputePass),
    ) -> Result<(), GpuError> {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(label),
                timestamp_writes: None,
            });
            record(&mut pass);
        }
        let index = self.queue.submit([encoder.finish()]);
        self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })?;
        Ok(())
    }
}

/// The cooperative-matrix shapes a kernel can use on this device, smallest first: square configs
/// with f16 inputs and f32 accumulators, the only kind fak's kernels are written for, on an
/// adapter whose subgroups are exactly 32 wide (the kernels split a workgroup into 32-lane
/// subgroups by `subgroup_id`; wgsl/matmul_coop.wgsl).
fn coop_shapes(facts: &AdapterFacts, features: wgpu::Features) -> Vec<CoopShape> {
    if !features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        || (facts.subgroup_min_size, facts.subgroup_max_size) != (32, 32)
    {
        return Vec::new();
    }
    CoopShape::ALL
        .into_iter()
        .filter(|shape| {
            let n = shape.size();
            facts.cooperative_matrix.iter().any(|c| {
                c.m == n && c.n == n && c.k == n && c.ab_type == "f16" && c.cr_type == "f32"
            })
        })
        .collect()
}
