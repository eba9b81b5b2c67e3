//! A kernel's WGSL read back through naga, for the tests that hold the host's geometry (tile
//! sizes, workgroup memory) to what the WGSL declares, on adapters that cannot run it too.

use fak::gpu::{CoopShape, KernelPaths};
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

/// The paths of each cooperative-matrix variant (subgroups and f16, no int dot), with its shape.
pub fn all_coop_paths() -> impl Iterator<Item = (CoopShape, KernelPaths)> {
    CoopShape::ALL.into_iter().map(|coop| {
        let paths = KernelPaths {
            subgroup: true,
            f16: true,
            coop_matrix: Some(coop),
            int_dot: false,
        };
        (coop, paths)
    })
}

/// `text` parsed; panics with naga's report.
pub fn parse(text: &str) -> naga::Module {
    naga::front::wgsl::parse_str(text)
        .map_err(|e| e.emit_to_string(text))
        .unwrap()
}

/// `text` parsed and validated with every capability; panics with naga's report.
pub fn parse_valid(text: &str) -> (naga::Module, ModuleInfo) {
    let module = parse(text);
    let info = Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(&module)
        .map_err(|e| e.emit_to_string(text))
        .unwrap();
    (module, info)
}

/// The bytes of the module's workgroup variables (naga's layouter): all of them, or with
/// `used_by` only those its entry point of that name uses.
pub fn workgroup_bytes(module: &naga::Module, used_by: Option<(&ModuleInfo, &str)>) -> u32 {
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).unwrap();
    let used = used_by.map(|(info, name)| {
        let entry = module
            .entry_points
            .iter()
            .position(|e| e.name == name)
            .unwrap_or_else(|| panic!("no entry point {name}"));
        info.get_entry_point(entry)
    });
    module
        .global_variables
        .iter()
        .filter(|&(handle, var)| {
            var.space == naga::AddressSpace::WorkGroup
                && used.is_none_or(|used| !used[handle].is_empty())
        })
        .map(|(_, var)| layouter[var.ty].size)
        .sum()
}

/// The module's workgroup variables (name, bytes) whose size is not a whole number of 16 bytes.
/// Cooperative-matrix kernels keep none: on the H200 (NVIDIA 580.159.04) a lone u32 beside the
/// f16 tiles made their MMAs come out wrong, and padding it to a vec4 fixed them
/// (experiments/coop-probe: `flag_plain_beside` failed, `uniform_load_vec4_*` passed).
pub fn odd_sized_workgroup_vars(module: &naga::Module) -> Vec<(String, u32)> {
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).unwrap();
    module
        .global_variables
        .iter()
        .filter(|(_, var)| var.space == naga::AddressSpace::WorkGroup)
        .map(|(_, var)| (var.name.clone().unwrap_or_default(), layouter[var.ty].size))
        .filter(|&(_, size)| size % 16 != 0)
        .collect()
}

/// The value of the module's `const name: u32`.
pub fn u32_const(module: &naga::Module, name: &str) -> u32 {
    let (_, c) = module
        .constants
        .iter()
        .find(|(_, c)| c.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no const {name}"));
    match module.global_expressions[c.init] {
        naga::Expression::Literal(naga::Literal::U32(v)) => v,
        ref other => panic!("{name} is {other:?}, not a u32 literal"),
    }
}
