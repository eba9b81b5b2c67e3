//! Kernel paths: which optional hardware features a compiled kernel variant may use.
//!
//! Every kernel that uses subgroups, f16 or cooperative matrices also has a variant without them.
//! [`KernelPaths`] says which of those fast paths are allowed; each kernel keeps only the axes it
//! actually has ([`Axes::select`]), so the same `KernelPaths` value drives every kernel. Paths can
//! be forced off (environment `FAK_FORCE=no-subgroup,no-f16,no-coop-matrix,no-int-dot`, or
//! [`KernelPaths::without`] in tests) so that every fallback runs on an adapter that has the fast
//! path too.
//!
//! One path is not a hardware feature but a change of numerics: `int_dot` quantizes the decode
//! mat-vec's input to 8-bit blocks and multiplies with integer dot products (`dot4I8Packed`, core
//! WGSL: every adapter runs it, natively or through naga's polyfill). It is the default where
//! [`crate::gpu::int_dot_pays`] says so (Vulkan and DX12 GPUs) and `FAK_INT_DOT=1` / `=0`
//! ([`crate::gpu::ContextOptions::int_dot`]) forces it either way.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Cooperative-matrix tile shapes WGSL can express (`coop_mat8x8`, `coop_mat16x16`).
///
/// Metal's simdgroup matrices are 8×8 only; NVIDIA's Vulkan driver offers 16×16 (and no 8×8), so
/// a kernel needs one variant per shape plus a fallback (wgpu-notes.md §1b).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum CoopShape {
    M8x8,
    M16x16,
}

impl CoopShape {
    pub const ALL: [CoopShape; 2] = [CoopShape::M8x8, CoopShape::M16x16];

    pub fn size(self) -> u32 {
        match self {
            CoopShape::M8x8 => 8,
            CoopShape::M16x16 => 16,
        }
    }
}

/// The fast paths a kernel may take.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct KernelPaths {
    /// Subgroup operations (`subgroupAdd`, …), any subgroup size.
    pub subgroup: bool,
    /// The WGSL `f16` type (`enable f16;`).
    pub f16: bool,
    /// Cooperative-matrix tiles of this shape (`enable wgpu_cooperative_matrix;`, f16 inputs).
    pub coop_matrix: Option<CoopShape>,
    /// Decode mat-vecs on 8-bit quantized inputs with integer dot products (wgsl/quantize_q8.wgsl,
    /// wgsl/matvec_q8.wgsl): llama.cpp's activation rounding, not the f32 reference's.
    pub int_dot: bool,
}

/// Fast paths a caller can switch off (see [`KernelPaths::without`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
pub struct Forced {
    pub no_subgroup: bool,
    pub no_f16: bool,
    pub no_coop_matrix: bool,
    pub no_int_dot: bool,
}

impl Forced {
    /// Parses `FAK_FORCE`: a comma-separated list of `no-subgroup`, `no-f16`, `no-coop-matrix`,
    /// `no-int-dot` (or `fallback` for all four). Unknown words are an error, so a typo cannot silently test
    /// the fast path.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut forced = Forced::default();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "no-subgroup" => forced.no_subgroup = true,
                "no-f16" => forced.no_f16 = true,
                "no-coop-matrix" => forced.no_coop_matrix = true,
                "no-int-dot" => forced.no_int_dot = true,
                "fallback" => {
                    forced = Forced {
                        no_subgroup: true,
                        no_f16: true,
                        no_coop_matrix: true,
                        no_int_dot: true,
                    }
                }
                other => {
                    return Err(format!(
                        "unknown path `{other}` (expected no-subgroup, no-f16, no-coop-matrix, \
                         no-int-dot or fallback)"
                    ));
                }
            }
        }
        Ok(forced)
    }
}

impl KernelPaths {
    /// No optional feature at all: runs on every adapter.
    pub const FALLBACK: KernelPaths = KernelPaths {
        subgroup: false,
        f16: false,
        coop_matrix: None,
        int_dot: false,
    };

    /// These paths with the forced ones switched off.
    pub fn without(self, forced: Forced) -> KernelPaths {
        KernelPaths {
            subgroup: self.subgroup && !forced.no_subgroup,
            f16: self.f16 && !forced.no_f16,
            coop_matrix: self.coop_matrix.filter(|_| !forced.no_coop_matrix),
            int_dot: self.int_dot && !forced.no_int_dot,
        }
    }

    /// The device features a variant on these paths needs.
    pub fn required_features(self) -> wgpu::Features {
        let mut features = wgpu::Features::empty();
        if self.subgroup {
            features |= wgpu::Features::SUBGROUP;
        }
        if self.f16 {
            features |= wgpu::Features::SHADER_F16;
        }
        if self.coop_matrix.is_some() {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        features
    }

    /// A short name for labels and test output: `subgroup+f16`, `fallback`, …
    pub fn name(self) -> String {
        let mut parts = Vec::new();
        if self.subgroup {
            parts.push("subgroup".to_string());
        }
        if self.f16 {
            parts.push("f16".to_string());
        }
        if let Some(shape) = self.coop_matrix {
            let n = shape.size();
            parts.push(format!("coop{n}x{n}"));
        }
        if self.int_dot {
            parts.push("int-dot".to_string());
        }
        if parts.is_empty() {
            "fallback".to_string()
        } else {
            parts.join("+")
        }
    }
}

impl fmt::Display for KernelPaths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The variant axes one kernel has. A kernel without a subgroup variant ignores the subgroup path,
/// and so on; cooperative-matrix kernels also need f16 (their tiles take f16 inputs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Axes {
    pub subgroup: bool,
    pub f16: bool,
    pub coop_matrix: bool,
    pub int_dot: bool,
}

impl Axes {
    pub const NONE: Axes = Axes {
        subgroup: false,
        f16: false,
        coop_matrix: false,
        int_dot: false,
    };

    /// The variant of a kernel with these axes that `allowed` selects: the fastest it permits.
    pub fn select(self, allowed: KernelPaths) -> KernelPaths {
        let f16 = self.f16 && allowed.f16;
        KernelPaths {
            subgroup: self.subgroup && allowed.subgroup,
            f16,
            coop_matrix: allowed.coop_matrix.filter(|_| self.coop_matrix && f16),
            int_dot: self.int_dot && allowed.int_dot,
        }
    }

    /// Every variant a kernel with these axes has, fallback first.
    pub fn variants(self) -> Vec<KernelPaths> {
        let subgroups: &[bool] = if self.subgroup {
            &[false, true]
        } else {
            &[false]
        };
        let f16s: &[bool] = if self.f16 { &[false, true] } else { &[false] };
        let int_dots: &[bool] = if self.int_dot {
            &[false, true]
        } else {
            &[false]
        };
        let mut out = Vec::new();
        for &int_dot in int_dots {
            for &subgroup in subgroups {
                for &f16 in f16s {
                    let base = KernelPaths {
                        subgroup,
                        f16,
                        coop_matrix: None,
                        int_dot,
                    };
                    out.push(base);
                    if self.coop_matrix && f16 {
                        for shape in CoopShape::ALL {
                            out.push(KernelPaths {
                                coop_matrix: Some(shape),
                                ..base
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: KernelPaths = KernelPaths {
        subgroup: true,
        f16: true,
        coop_matrix: Some(CoopShape::M16x16),
        int_dot: true,
    };

    #[test]
    fn a_kernel_keeps_only_the_axes_it_has() {
        let f16_only = Axes {
            f16: true,
            ..Axes::NONE
        };
        assert_eq!(
            f16_only.select(ALL),
            KernelPaths {
                f16: true,
                ..KernelPaths::FALLBACK
            }
        );
        assert_eq!(Axes::NONE.select(ALL), KernelPaths::FALLBACK);
    }

    #[test]
    fn cooperative_matrix_needs_the_f16_path() {
        let coop = Axes {
            f16: true,
            coop_matrix: true,
            ..Axes::NONE
        };
        let no_f16 = ALL.without(Forced {
            no_f16: true,
            ..Forced::default()
        });
        assert_eq!(coop.select(no_f16).coop_matrix, None);
        assert!(
            coop.variants()
                .iter()
                .all(|v| v.coop_matrix.is_none() || v.f16)
        );
        // fallback, f16, f16+coop8, f16+coop16
        assert_eq!(coop.variants().len(), 4);
    }

    #[test]
    fn forcing_parses_known_words_and_rejects_typos() {
        let forced = Forced::parse("no-subgroup, no-f16").unwrap();
        assert!(!ALL.without(forced).subgroup);
        assert!(!ALL.without(forced).f16);
        assert_eq!(ALL.without(forced).coop_matrix, Some(CoopShape::M16x16));
        assert_eq!(
            ALL.without(Forced::parse("fallback").unwrap()),
            KernelPaths::FALLBACK
        );
        assert!(!ALL.without(Forced::parse("no-int-dot").unwrap()).int_dot);
        assert!(Forced::parse("no-subgroups").is_err());
    }
}
