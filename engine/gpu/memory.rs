//! How much memory the adapter has, so a model that cannot fit is refused before any upload
//! (DESIGN.md "Memory"). wgpu does not report it, so it is read from the backend:
//! - Vulkan: the largest DEVICE_LOCAL heap (VRAM on a discrete GPU; system memory on lavapipe
//!   and on integrated GPUs that share it).
//! - elsewhere (Metal's unified memory, DX12): unknown here, reported as `None`; the engine then
//!   relies on per-buffer limits and the allocation errors wgpu returns.

/// Bytes of the adapter's largest device-local memory heap, where the backend tells.
pub fn device_memory_bytes(adapter: &wgpu::Adapter) -> Option<u64> {
    #[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
    {
        vulkan_device_local_bytes(adapter)
    }
    #[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
    {
        let _ = adapter;
        None
    }
}

#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
fn vulkan_device_local_bytes(adapter: &wgpu::Adapter) -> Option<u64> {
    // SAFETY: only reads immutable physical-device properties through the raw handles wgpu
    // keeps alive for as long as `adapter` lives.
    unsafe {
        let hal = adapter.as_hal::<wgpu::hal::api::Vulkan>()?;
        let instance = hal.shared_instance().raw_instance();
        let props = instance.get_physical_device_memory_properties(hal.raw_physical_device());
        props
            .memory_heaps_as_slice()
            .iter()
            .filter(|h| h.flags.contains(ash::vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
    }
}
