//! The wgpu context (adapter choice, the device's limits and features, the paths it can run)
//! and the buffer helpers.

use fak::gpu::context::{all_adapters, choose, default_backends};
use fak::gpu::{
    AdapterFacts, GpuError, KernelPaths, KeyLimits, build, read_back, registry, upload, write,
};
use fak_tests::gpu;

#[test]
fn the_device_gets_the_adapters_full_limits() {
    let ctx = gpu();
    // Not the WebGPU defaults (128 MiB bindings, 256 invocations) a plain request would get.
    assert_eq!(KeyLimits::of(&ctx.device.limits()), ctx.facts().limits);
    let limits = ctx.device.limits();
    assert!(ctx.max_binding_size() <= limits.max_storage_buffer_binding_size);
    assert!(ctx.max_binding_size() <= 1 << 31);
}

#[test]
fn every_optional_feature_the_adapter_has_is_requested() {
    let ctx = gpu();
    let device = ctx.device.features();
    for name in [
        "SHADER_F16",
        "SUBGROUP",
        "IMMEDIATES",
        "TIMESTAMP_QUERY",
        "PIPELINE_CACHE",
    ] {
        let feature = wgpu::Features::from_name(name).unwrap();
        assert_eq!(
            device.contains(feature),
            ctx.facts().has_feature(name),
            "{name}: device and adapter disagree"
        );
    }
    // Experimental cooperative matrices are never requested when switched off (FAK_COOP_MATRIX=0).
    if std::env::var("FAK_COOP_MATRIX").as_deref() == Ok("0") {
        assert!(!device.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX));
    }
}

#[test]
fn runnable_paths_start_with_the_fallback_and_need_only_device_features() {
    let ctx = gpu();
    let paths = ctx.runnable_paths();
    assert_eq!(paths[0], KernelPaths::FALLBACK);
    for p in &paths {
        assert!(ctx.missing_features(*p).is_empty(), "{p} is not runnable");
    }
    let has = |f| ctx.device.features().contains(f);
    assert_eq!(
        paths.iter().any(|p| p.subgroup),
        has(wgpu::Features::SUBGROUP)
    );
    assert_eq!(paths.iter().any(|p| p.f16), has(wgpu::Features::SHADER_F16));
    assert!(
        paths.contains(&ctx.paths()),
        "the default paths {} are not runnable",
        ctx.paths()
    );
}

#[test]
fn an_adapter_name_that_matches_nothing_is_an_error_listing_the_adapters() {
    let adapters = all_adapters();
    let err = choose(
        &adapters,
        Some("no-such-adapter-anywhere"),
        default_backends(),
    )
    .unwrap_err();
    let GpuError::NoMatchingAdapter { wanted, available } = &err else {
        panic!("expected NoMatchingAdapter, got {err}");
    };
    assert_eq!(wanted, "no-such-adapter-anywhere");
    assert!(!available.is_empty());
    let message = err.to_string();
    assert!(message.contains(&available[0]), "{message}");
}

#[test]
fn an_adapter_is_found_by_a_case_insensitive_name_substring() {
    let adapters = all_adapters();
    let best = choose(&adapters, None, default_backends()).unwrap();
    let name = adapters[best].get_info().name;
    let fragment = name[..name.len().min(5)].to_uppercase();
    let found = choose(&adapters, Some(&fragment), default_backends()).unwrap();
    assert!(
        adapters[found]
            .get_info()
            .name
            .to_uppercase()
            .contains(&fragment)
    );
}

#[test]
fn adapter_facts_survive_a_json_round_trip() {
    let facts = gpu().facts().clone();
    let json = serde_json::to_string(&facts).unwrap();
    let back: AdapterFacts = serde_json::from_str(&json).unwrap();
    assert_eq!(back, facts);
    assert!(!facts.features.is_empty() && !facts.name.is_empty());
}

#[test]
fn uploads_read_back_bit_for_bit_with_a_ragged_tail_padded_by_zeros() {
    let ctx = gpu();
    let mut rng = fak_tests::rng(0xb0ff_0001);
    let data: Vec<u8> = (0..4099).map(|_| rand::Rng::random(&mut rng)).collect();
    let buffer = upload(ctx, "round trip", &data).unwrap();
    assert_eq!(buffer.size(), 4100);
    let back = read_back(ctx, &buffer, 0..4100).unwrap();
    assert_eq!(&back[..4099], &data[..]);
    assert_eq!(back[4099], 0);
    assert_eq!(read_back(ctx, &buffer, 8..16).unwrap(), &data[8..16]);
}

#[test]
fn buffer_ranges_outside_whole_words_of_the_buffer_are_errors_not_panics() {
    let ctx = gpu();
    let buffer = upload(ctx, "ranges", &[0u8; 64]).unwrap();
    assert!(range_error(read_back(ctx, &buffer, 0..68)));
    assert!(range_error(read_back(ctx, &buffer, 2..8)));
    assert!(range_error(write(ctx, &buffer, 62, &[1, 2])));
    assert!(range_error(write(ctx, &buffer, 60, &[0u8; 8])));
    // The tail of 3 bytes is padded to one word: it still fits.
    assert!(write(ctx, &buffer, 60, &[1, 2, 3]).is_ok());
}

fn range_error<T>(result: Result<T, GpuError>) -> bool {
    matches!(result, Err(GpuError::BufferRange { .. }))
}

/// The driver-level half of the portability test: on this device, every registered variant whose
/// features it has compiles to pipelines (what `harness selftest` will also do).
#[test]
fn every_registered_variant_the_device_can_run_builds_on_it() {
    let ctx = gpu();
    let runnable: Vec<_> = registry()
        .into_iter()
        .filter(|v| ctx.missing_features(v.paths).is_empty())
        .collect();
    assert!(!runnable.is_empty());
    // On as many threads as there are cores: a software driver (lavapipe) compiles each pipeline
    // on the calling thread, so one thread left the other cores idle for a minute or more.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(variant) =
                    runnable.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let built = build(ctx, variant).unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(built.pipelines.len(), variant.source.pipelines.len());
                }
            });
        }
    });
}

/// The integer mat-vec path is the default on Vulkan and DX12 GPUs only (`int_dot_pays`), and the
/// context takes it exactly where that says, unless `FAK_INT_DOT` forces it.
#[test]
fn the_integer_path_is_the_default_on_vulkan_and_dx12_gpus_only() {
    let ctx = gpu();
    let on = |backend: &str, device_type: &str| {
        let mut facts = ctx.facts().clone();
        facts.backend = backend.into();
        facts.device_type = device_type.into();
        fak::gpu::int_dot_pays(&facts)
    };
    assert!(on("vulkan", "discrete"));
    assert!(on("vulkan", "integrated"));
    assert!(on("dx12", "discrete"));
    assert!(
        !on("vulkan", "cpu"),
        "lavapipe runs dot4I8Packed through a polyfill"
    );
    assert!(!on("metal", "integrated"), "Apple GPUs have no 4×8-bit dot");
    assert!(!on("gl", "discrete"));
    let want = match std::env::var("FAK_INT_DOT").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => fak::gpu::int_dot_pays(ctx.facts()),
    };
    let forced_off = std::env::var("FAK_FORCE")
        .map(|list| fak::gpu::Forced::parse(&list).unwrap().no_int_dot)
        .unwrap_or(false);
    assert_eq!(ctx.paths().int_dot, want && !forced_off);
}
