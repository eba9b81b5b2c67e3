//! `harness devices`: every GPU adapter wgpu sees, with what kernels care about.

use anyhow::{Result, bail};
use fak::gpu::AdapterFacts;
use fak::gpu::context::{all_adapters, choose, default_backends};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One adapter and whether fak would use it (`FAK_ADAPTER`, `WGPU_BACKEND` applied).
#[derive(Serialize)]
struct Row {
    chosen: bool,
    #[serde(flatten)]
    facts: AdapterFacts,
}

pub fn run(args: Args) -> Result<()> {
    let adapters = all_adapters();
    if adapters.is_empty() {
        bail!("no GPU adapter found (WGPU_BACKEND and VK_DRIVER_FILES narrow the search)");
    }
    let wanted = std::env::var("FAK_ADAPTER").ok().filter(|s| !s.is_empty());
    // A FAK_ADAPTER that matches nothing is reported, not fatal: listing is how one finds a name.
    let chosen = choose(&adapters, wanted.as_deref(), default_backends())
        .map_err(|e| eprintln!("note: {e}"))
        .ok();
    let rows: Vec<Row> = adapters
        .iter()
        .enumerate()
        .map(|(i, a)| Row {
            chosen: chosen == Some(i),
            facts: AdapterFacts::of(a),
        })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for row in &rows {
            print_row(row);
        }
    }
    Ok(())
}

fn print_row(row: &Row) {
    let f = &row.facts;
    let l = &f.limits;
    let mark = if row.chosen { "*" } else { " " };
    println!("{mark} {}", f.name);
    println!(
        "    backend {} · type {} · vendor {:#06x} · device {:#06x}",
        f.backend, f.device_type, f.vendor_id, f.device_id
    );
    println!("    driver {} ({})", f.driver, f.driver_info);
    println!(
        "    subgroup size {}..{} · device memory {}",
        f.subgroup_min_size,
        f.subgroup_max_size,
        f.memory_bytes.map_or("unknown".to_string(), bytes)
    );
    println!(
        "    limits: buffer {} · storage binding {} · storage buffers/stage {} · workgroup {} \
         invocations, {:?} size, {} shared · workgroups/dimension {} · immediates {} B · \
         storage offset alignment {}",
        bytes(l.max_buffer_size),
        bytes(l.max_storage_buffer_binding_size),
        l.max_storage_buffers_per_shader_stage,
        l.max_compute_invocations_per_workgroup,
        l.max_compute_workgroup_size,
        bytes(l.max_compute_workgroup_storage_size.into()),
        l.max_compute_workgroups_per_dimension,
        l.max_immediate_size,
        l.min_storage_buffer_offset_alignment,
    );
    let coop: Vec<String> = f
        .cooperative_matrix
        .iter()
        .map(|c| format!("{}x{}x{} {}->{}", c.m, c.n, c.k, c.ab_type, c.cr_type))
        .collect();
    println!(
        "    cooperative matrix: {}",
        if coop.is_empty() {
            "none".to_string()
        } else {
            coop.join(", ")
        }
    );
    println!("    features: {}", f.features.join(" "));
}

/// A byte count in the largest binary unit that keeps it whole-ish (`128 MiB`, `2.0 GiB`).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
