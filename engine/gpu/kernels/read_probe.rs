//! `read_probe`: how fast this device streams memory into its shader cores (wgsl/read_probe.wgsl).
//! A decode step reads every weight once, so its time can be no less than the step's bytes over
//! this bandwidth: `harness bench` divides by it for the roofline, and `harness selftest` records
//! it beside the kernel suite.
//!
//! The probe reads one buffer of `bytes` (at most one binding), a few times in a row; each pass is
//! timed with pass timestamps where the device has `TIMESTAMP_QUERY`, else on the host (submit to
//! completion, which also counts the submit's overhead: [`ReadBandwidth::timing`] says which).

use super::tensors::bind_group;
use crate::gpu::buffers::{read_back, storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use std::time::{Duration, Instant};

/// Invocations per workgroup (`override WG`).
const WG: u32 = 256;
/// Workgroups per dispatch: enough invocations in flight to cover DRAM latency on a large GPU
/// (2048 × 256 = 512 Ki invocations, ~4 per hardware thread slot of an H200), few enough that
/// each walks a long stretch of the buffer.
const WORKGROUPS: u32 = 2048;
/// Untimed work first, for at least this long: the first touch of the buffer, and the clocks. An
/// idle H200 sits at 345 MHz and needs ~100–200 ms of sustained load to reach 1980 (nvidia-smi,
/// experiments/NOTES.md, session 2026-12-04 #2); three single-dispatch warm-up passes with a wait
/// after each never got it there (1.83 TB/s measured against 4.4–4.5 TB/s with the clock up).
const WARM_UP: Duration = Duration::from_millis(400);
/// Dispatches one warm-up submission may grow to, doubling while a submission takes < 20 ms (so
/// the GPU is busy back to back, not waiting on the host between tiny passes).
const WARM_UP_MAX_DISPATCHES: u32 = 256;
/// The fold of a zero-filled buffer is 0; the sink is written only when it equals this.
const NEVER: u32 = 1;
/// src, sink, params.
const SLOTS: &[Slot] = &[Slot::Read, Slot::ReadWrite, Slot::Uniform];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    words: u32,
    never: u32,
    pad: [u32; 2],
}

/// How the probe's passes were timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeTiming {
    /// Timestamps at the pass's start and end (GPU time only).
    PassTimestamps,
    /// Host time from submit to completion (includes the submit's own overhead).
    HostWall,
}

/// A measured read bandwidth.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReadBandwidth {
    /// Bytes one pass read.
    pub bytes: u64,
    /// Seconds of each timed pass, in the order they ran.
    pub pass_seconds: Vec<f64>,
    /// bytes / the fastest pass, in GB/s (10^9 bytes per second): the ceiling is what the
    /// device can do, not what it did on average.
    pub gb_per_s: f64,
    pub timing: ProbeTiming,
}

pub struct ReadProbe {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

impl Kernel for ReadProbe {
    const NAME: &'static str = "read_probe";
    const AXES: Axes = Axes::NONE;

    fn source(variant: KernelPaths) -> KernelSource {
        KernelSource {
            module: WgslModule::new(variant).with(crate::gpu::kernel::wgsl::READ_PROBE),
            slots: SLOTS,
            pipelines: vec![PipelineSpec {
                label: "read_probe".into(),
                entry_point: "read_probe",
                constants: vec![("WG", f64::from(WG))],
            }],
        }
    }
}

impl ReadProbe {
    pub fn new(ctx: &GpuContext) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(KernelPaths::FALLBACK);
        let mut built = build(ctx, &variant)?;
        Ok(ReadProbe {
            layout: built.layout,
            pipeline: built.pipelines.remove(0),
        })
    }

    /// Streams a zero-filled buffer of `bytes` (rounded down to 16-byte words, at most one
    /// binding and 2^32 − 1 words) `passes` times after [`WARM_UP`] of untimed streaming.
    pub fn measure(
        &self,
        ctx: &GpuContext,
        bytes: u64,
        passes: usize,
    ) -> Result<ReadBandwidth, GpuError> {
        let bytes = bytes.min(ctx.max_binding_size()) & !15;
        if bytes == 0 || passes == 0 {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!("a probe of {bytes} bytes and {passes} passes"),
            });
        }
        let src = storage_buffer(ctx, "read probe source", bytes)?;
        let sink = storage_buffer(ctx, "read probe sink", 4 * u64::from(WG))?;
        let params = uniform(
            ctx,
            "read probe params",
            &Params {
                words: (bytes / 16) as u32,
                never: NEVER,
                pad: [0; 2],
            },
        );
        let group = bind_group(
            ctx,
            "read probe",
            &self.layout,
            vec![
                src.as_entire_binding(),
                sink.as_entire_binding(),
                params.as_entire_binding(),
            ],
        );
        let has_timestamps = ctx
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY);
        let queries = has_timestamps.then(|| {
            ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("read probe timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            })
        });
        let resolved = storage_query_buffer(ctx);
        let period_s = f64::from(ctx.queue.get_timestamp_period()) * 1e-9;
        self.warm_up(ctx, &group)?;
        let mut pass_seconds = Vec::with_capacity(passes);
        for _ in 0..passes {
            let timestamps = queries.as_ref().map(|query_set| (query_set, &resolved));
            let wall = self.stream(ctx, &group, 1, timestamps)?.as_secs_f64();
            let seconds = match &queries {
                Some(_) => {
                    let ticks: Vec<u64> =
                        bytemuck::pod_collect_to_vec(&read_back(ctx, &resolved, 0..16)?);
                    ticks[1].saturating_sub(ticks[0]) as f64 * period_s
                }
                None => wall,
            };
            pass_seconds.push(seconds);
        }
        let fastest = pass_seconds.iter().copied().fold(f64::INFINITY, f64::min);
        Ok(ReadBandwidth {
            bytes,
            gb_per_s: bytes as f64 / fastest / 1e9,
            pass_seconds,
            timing: if has_timestamps {
                ProbeTiming::PassTimestamps
            } else {
                ProbeTiming::HostWall
            },
        })
    }

    /// Keeps the GPU streaming the buffer for [`WARM_UP`]: submissions of back-to-back
    /// dispatches, twice as many each time one finishes in under 20 ms.
    fn warm_up(&self, ctx: &GpuContext, group: &wgpu::BindGroup) -> Result<(), GpuError> {
        let started = Instant::now();
        let mut dispatches = 1;
        while started.elapsed() < WARM_UP {
            if self.stream(ctx, group, dispatches, None)? < Duration::from_millis(20) {
                dispatches = (dispatches * 2).min(WARM_UP_MAX_DISPATCHES);
            }
        }
        Ok(())
    }

    /// Streams the buffer `dispatches` times back to back in one pass (timestamped at its start
    /// and end, then resolved, when given a query set and the buffer it resolves to), submits
    /// it and waits: the host time from submit to completion.
    fn stream(
        &self,
        ctx: &GpuContext,
        group: &wgpu::BindGroup,
        dispatches: u32,
        timestamps: Option<(&wgpu::QuerySet, &wgpu::Buffer)>,
    ) -> Result<Duration, GpuError> {
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("read probe"),
            });
        {
            let timestamp_writes =
                timestamps.map(|(query_set, _)| wgpu::ComputePassTimestampWrites {
                    query_set,
                    beginning_of_pass_write_index: Some(0),
                    end_of_pass_write_index: Some(1),
                });
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("read probe"),
                timestamp_writes,
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, group, &[]);
            for _ in 0..dispatches {
                pass.dispatch_workgroups(WORKGROUPS, 1, 1);
            }
        }
        if let Some((query_set, resolved)) = timestamps {
            encoder.resolve_query_set(query_set, 0..2, resolved, 0);
        }
        let started = Instant::now();
        let index = ctx.queue.submit([encoder.finish()]);
        ctx.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })?;
        Ok(started.elapsed())
    }
}

/// Where two resolved timestamps land before being read back.
fn storage_query_buffer(ctx: &GpuContext) -> wgpu::Buffer {
    ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read probe resolved timestamps"),
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    })
}
