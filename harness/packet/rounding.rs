//! Each engine's own rounding, as the CPU reference can mirror it: what own-rounding parity
//! compares an engine with (the same model on the same weights, computed the way that engine
//! rounds), decided from what the arm's raw file records about the engine, so that the harness
//! (which runs the reference) and `harness validate` (which checks the packet names it) agree.
//!
//! - fak-native: `serve-arm`'s `teacher_forced_rounding` fact (`fak::runtime::rounding`): one
//!   pass over the ids in the engine's own steps, mat-mul steps and mat-vec steps each rounded
//!   as its kernel path does, the KV cache in f16 on the f16 path.
//! - llama.cpp on the CPU (ggml-cpu): every mat-mul input rounded to the weight type's
//!   `vec_dot_type` (`Activations::GgmlCpu`), keys and values cached in f16 (its default), and
//!   flash attention (`-fa auto` or `on`) as ggml-cpu picks its kernel by the micro-batch's rows.
//!   The quality pass asks for each row in a request of its own (`cache_prompt` off) of that
//!   many ids, one micro-batch while it fits `n_ubatch` (512): under 64 ids the one-chunk kernel
//!   (f16 query, f16 accumulator: `AttentionRounding::GgmlFlashF16`), from 64 ids the tiled
//!   kernel (f32 over the f16 cache: `AttentionRounding::F16Cache`). Measured on the trained
//!   tiny models (experiments/NOTES.md, parity): with flash attention off and an f32 cache the
//!   reference with `GgmlCpu` alone meets llama.cpp at cosine ≥ 0.99999 (top-16), so what
//!   remains is attention's rounding. (The peer build's ggml — llama-cpp-python 0.3.36's
//!   vendored copy — pads a partial 64-row tile inside the tiled kernel, so every row of a
//!   request of 64 ids or more is rounded alike.) Rounding is per row in both kernels and in the
//!   mat-muls, so the rows of one teacher-forced pass under one attention rounding are the last
//!   rows of every request rounded that way: two passes give every row
//!   ([`OwnRoundingPlan::logits`]).
//!   Anything that changes those choices (another cache type, micro-batch size, context
//!   checkpoints, flash attention off, a GPU backend) leaves llama.cpp without an own-rounding
//!   reference: its parity is then not judged, and the packet says why.

use super::quality::RoundingRule;
use super::raw::{ArmDevice, DeviceKind, EngineInfo};
use fak::gguf::Gguf;
use fak::model::ModelError;
use fak::reference::{Activations, AttentionRounding, Reference, for_model};
use fak::runtime::rounding::TeacherForcedRounding;

/// Query rows from which ggml-cpu's flash attention takes its tiled kernel
/// (`ggml_fa_tile_config::Q`).
pub const GGML_FA_TILED_ROWS: usize = 64;
/// llama.cpp's default micro-batch (`n_ubatch`): a longer request is split, which the plan
/// does not follow.
pub const LLAMA_CPP_UBATCH: usize = 512;

/// How the reference mirrors one engine.
#[derive(Clone, Debug, PartialEq)]
pub enum OwnRounding {
    /// One pass over the ids in the engine's steps (fak).
    Steps(TeacherForcedRounding),
    /// Each row from a request of its own of that many ids (llama.cpp): requests of fewer
    /// than `rows` ids rounded as `short`, the rest as `long`.
    PerRequest {
        activations: Activations,
        rows: usize,
        short: AttentionRounding,
        long: AttentionRounding,
    },
}

/// The own-rounding reference of an arm, and why it is that engine's.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnRoundingPlan {
    pub rounding: OwnRounding,
    pub why: String,
}

impl OwnRoundingPlan {
    /// The rules as the packet records them.
    pub fn rules(&self) -> Vec<RoundingRule> {
        let rule =
            |rows: String, activations: Option<Activations>, attention: AttentionRounding| {
                RoundingRule {
                    rows,
                    activations: activations.map_or("not emulated", |a| a.name()).into(),
                    attention: attention.name().into(),
                }
            };
        match &self.rounding {
            OwnRounding::Steps(r) => {
                let mat_mul = rule(
                    format!(
                        "steps of {} to {} ids (mat-mul)",
                        r.mat_vec_max_tokens + 1,
                        r.step_tokens
                    ),
                    Some(r.mat_mul),
                    r.attention,
                );
                let mat_vec = (r.mat_vec_max_tokens > 0).then(|| {
                    rule(
                        format!("steps of up to {} ids (mat-vec)", r.mat_vec_max_tokens),
                        r.mat_vec,
                        r.attention,
                    )
                });
                std::iter::once(mat_mul).chain(mat_vec).collect()
            }
            OwnRounding::PerRequest {
                activations,
                rows,
                short,
                long,
            } => vec![
                rule(
                    format!("rows of requests under {rows} ids"),
                    Some(*activations),
                    *short,
                ),
                rule(
                    format!("rows of requests of {rows} ids or more"),
                    Some(*activations),
                    *long,
                ),
            ],
        }
    }

    /// The own-rounding reference's logits after each of `ids` (teacher-forced) on `gguf`: the
    /// rows the engine's teacher-forced logits are judged against.
    pub fn logits(&self, gguf: &Gguf, ids: &[u32]) -> Result<Vec<Vec<f32>>, ModelError> {
        match &self.rounding {
            OwnRounding::Steps(r) => {
                let steps = r.steps(ids.len()).map_err(ModelError::Input)?;
                let mut model = for_model(gguf, Activations::F32)?;
                let mut rows = Vec::with_capacity(ids.len());
                for step in steps {
                    let at = rows.len();
                    model.set_activations(step.activations)?;
                    model.set_attention(step.attention);
                    rows.extend(model.forward_all(&ids[at..at + step.tokens])?);
                }
                Ok(rows)
            }
            OwnRounding::PerRequest {
                activations,
                rows,
                short,
                long,
            } => {
                // Row i is the last row of a request of i + 1 ids.
                let pass = |attention: AttentionRounding, n: usize| {
                    let mut model: Box<dyn Reference> = for_model(gguf, *activations)?;
                    model.set_attention(attention);
                    model.forward_all(&ids[..n])
                };
                let n_short = ids.len().min(rows - 1);
                let mut out = pass(*short, n_short)?;
                if ids.len() > n_short {
                    out.extend(pass(*long, ids.len())?.into_iter().skip(n_short));
                }
                Ok(out)
            }
        }
    }
}

/// The own-rounding reference of arm `arm` as its raw header reports its engine and device, for
/// quality prompts of up to `max_ids` ids; `Err` says why there is none.
pub fn own_rounding(
    arm: &str,
    engine: &EngineInfo,
    device: Option<&ArmDevice>,
    max_ids: usize,
) -> Result<OwnRoundingPlan, String> {
    match arm {
        "fak-native" => fak(engine),
        "llama.cpp" => llama_cpp(engine, device, max_ids),
        other => Err(format!(
            "{other} runs other weights: no reference on the envelope's"
        )),
    }
}

fn fak(engine: &EngineInfo) -> Result<OwnRoundingPlan, String> {
    let facts = engine.build.as_ref();
    let reported = facts
        .and_then(|f| f.get("teacher_forced_rounding"))
        .ok_or("fak-native did not report its teacher-forced rounding")?;
    let rounding: TeacherForcedRounding = serde_json::from_value(reported.clone())
        .map_err(|e| format!("fak-native's teacher_forced_rounding: {e}"))?;
    let paths = facts
        .and_then(|f| f["kernel_paths"].as_str())
        .unwrap_or("unreported");
    let mat_vecs = match rounding.mat_vec_max_tokens {
        0 => "every step multiplies as mat-muls".to_string(),
        most => format!(
            "steps of more than {most} ids multiply as mat-muls, shorter ones as mat-vecs \
             (inputs {})",
            rounding.mat_vec.map_or("not emulated", Activations::name)
        ),
    };
    let why = format!(
        "fak-native's kernel paths {paths}: its teacher-forced logits run in steps of up to {} \
         ids; {mat_vecs} (mat-mul inputs {}); attention {}",
        rounding.step_tokens,
        rounding.mat_mul.name(),
        rounding.attention.name(),
    );
    Ok(OwnRoundingPlan {
        rounding: OwnRounding::Steps(rounding),
        why,
    })
}

/// Flags that change how llama.cpp rounds or batches the quality requests.
const LLAMA_CPP_UNFOLLOWED: [&str; 8] = [
    "-ctk",
    "--cache-type-k",
    "-ctv",
    "--cache-type-v",
    "-ub",
    "--ubatch-size",
    "-b",
    "--batch-size",
];

fn llama_cpp(
    engine: &EngineInfo,
    device: Option<&ArmDevice>,
    max_ids: usize,
) -> Result<OwnRoundingPlan, String> {
    let device = device.ok_or("llama.cpp's device is not recorded")?;
    if device.kind != DeviceKind::Cpu {
        return Err(format!(
            "llama.cpp ran on {} ({:?}), not ggml-cpu: its rounding is not emulated",
            device.name, device.kind
        ));
    }
    let args: Vec<String> = engine
        .flags
        .iter()
        .find_map(|f| f.strip_prefix("args="))
        .and_then(|a| serde_json::from_str(a).ok())
        .ok_or("llama.cpp's arguments are not recorded")?;
    let last = |names: &[&str]| {
        args.windows(2)
            .rev()
            .find(|w| names.contains(&w[0].as_str()))
            .map(|w| w[1].as_str())
    };
    if let Some(flag) = args
        .iter()
        .find(|a| LLAMA_CPP_UNFOLLOWED.contains(&a.as_str()))
    {
        return Err(format!(
            "llama.cpp ran with {flag}, which changes its cache type or micro-batches: not emulated"
        ));
    }
    let flash = last(&["-fa", "--flash-attn"]).unwrap_or("auto");
    if !matches!(flash, "auto" | "on") {
        return Err(format!(
            "llama.cpp ran with flash attention {flash}: its non-flash attention is not emulated"
        ));
    }
    if last(&["--ctx-checkpoints"]) != Some("0") {
        return Err(
            "llama.cpp ran with context checkpoints, which split a hybrid model's prompt: not \
             emulated"
                .into(),
        );
    }
    if max_ids > LLAMA_CPP_UBATCH {
        return Err(format!(
            "quality requests of up to {max_ids} ids exceed one micro-batch ({LLAMA_CPP_UBATCH}): \
             not emulated"
        ));
    }
    let rows = GGML_FA_TILED_ROWS;
    Ok(OwnRoundingPlan {
        rounding: OwnRounding::PerRequest {
            activations: Activations::GgmlCpu,
            rows,
            short: AttentionRounding::GgmlFlashF16,
            long: AttentionRounding::F16Cache,
        },
        why: format!(
            "llama.cpp on the CPU (ggml-cpu), flash attention {flash}, default f16 KV cache, no \
             context checkpoints: every mat-mul's input rounded to the weight type's vec_dot_type \
             (Q8_K for k-quants, Q8_0 for Q8_0/Q5_0/Q4_0, f16 for F16); each quality row is a \
             request of its own, one micro-batch: under {rows} ids ggml-cpu's one-chunk flash \
             attention (f16 query, f16 accumulator), from {rows} ids its tiled kernel (f32 over \
             the f16 cache)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::raw::ArmHeader;
    use crate::packet::testkit::header;

    fn plan_of(h: &ArmHeader, max_ids: usize) -> Result<OwnRoundingPlan, String> {
        own_rounding(&h.arm, &h.engine, h.device.as_ref(), max_ids)
    }

    fn llama_header(args: &[&str], kind: DeviceKind) -> ArmHeader {
        let mut h = header("llama.cpp");
        let words: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        h.engine.flags = vec![format!("args={}", serde_json::to_string(&words).unwrap())];
        h.device = Some(ArmDevice {
            name: "CPU".into(),
            kind,
            selftest_adapter: false,
        });
        h
    }

    #[test]
    fn llama_cpp_on_the_cpu_rounds_as_ggml_and_anything_else_is_refused() {
        let envelope = ["-fa", "auto", "--cache-ram", "0", "--ctx-checkpoints", "0"];
        let plan = plan_of(&llama_header(&envelope, DeviceKind::Cpu), 144).unwrap();
        let rules = plan.rules();
        assert_eq!(rules.len(), 2);
        assert_eq!(
            (rules[0].activations.as_str(), rules[0].attention.as_str()),
            ("ggml-cpu", "ggml-flash-f16")
        );
        assert_eq!(rules[1].attention, "f16-cache");
        assert!(plan_of(&llama_header(&envelope, DeviceKind::Gpu), 144).is_err());
        assert!(plan_of(&llama_header(&envelope, DeviceKind::Cpu), 600).is_err());
        let more = |extra: &[&str]| {
            let args: Vec<&str> = envelope.iter().chain(extra).copied().collect();
            plan_of(&llama_header(&args, DeviceKind::Cpu), 144)
        };
        assert!(more(&["-fa", "off"]).is_err());
        assert!(more(&["-ctk", "q8_0"]).is_err());
        assert!(more(&["--ctx-checkpoints", "8"]).is_err());
        assert!(more(&["--threads", "2"]).is_ok());
    }

    #[test]
    fn fak_reads_its_reported_rounding() {
        let mut h = header("fak-native");
        h.engine.build = Some(serde_json::json!({
            "kernel_paths": "subgroup+f16",
            "teacher_forced_rounding": {
                "step_tokens": 193, "mat_vec_max_tokens": 8, "mat_vec": "f32",
                "mat_mul": "f32", "attention": "f16-cache"
            }
        }));
        let plan = plan_of(&h, 144).unwrap();
        assert!(plan.why.contains("subgroup+f16"), "{}", plan.why);
        assert_eq!(plan.rules()[0].rows, "steps of 9 to 193 ids (mat-mul)");
        h.engine.build = Some(serde_json::json!({"kernel_paths": "fallback"}));
        assert!(plan_of(&h, 144).is_err());
        assert!(plan_of(&header("mlx"), 144).is_err());
    }
}
