#!/usr/bin/env python3
"""Lists each Vulkan device's cooperative-matrix configurations (VK_KHR_cooperative_matrix), through
ctypes on the Vulkan loader: nothing to build, so fetch-lavapipe.sh can check what a driver offers."""
import ctypes as C

vk = C.CDLL("libvulkan.so.1")
u32, ptr = C.c_uint32, C.c_void_p


class AppInfo(C.Structure):
    _fields_ = [("sType", u32), ("pNext", ptr), ("name", C.c_char_p), ("ver", u32),
                ("engine", C.c_char_p), ("engine_ver", u32), ("api", u32)]


class InstanceInfo(C.Structure):
    _fields_ = [("sType", u32), ("pNext", ptr), ("flags", u32), ("app", C.POINTER(AppInfo)),
                ("layers", u32), ("layer_names", ptr), ("exts", u32), ("ext_names", ptr)]


class CoopProps(C.Structure):
    _fields_ = [("sType", u32), ("pNext", ptr), ("m", u32), ("n", u32), ("k", u32),
                ("a", u32), ("b", u32), ("c", u32), ("result", u32), ("saturating", u32),
                ("scope", u32)]


TYPES = {0: "f16", 1: "f32", 2: "f64", 3: "i8", 4: "i16", 5: "i32", 6: "i64", 7: "u8", 8: "u16",
         9: "u32", 10: "u64", 1000141000: "bf16", 1000491002: "e4m3", 1000491003: "e5m2"}
SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue_family"}

app = AppInfo(0, None, b"coop_probe", 1, None, 0, (1 << 22) | (3 << 12))
info = InstanceInfo(1, None, 0, C.pointer(app), 0, None, 0, None)
instance = ptr()
assert vk.vkCreateInstance(C.byref(info), None, C.byref(instance)) == 0
count = u32()
vk.vkEnumeratePhysicalDevices(instance, C.byref(count), None)
devices = (ptr * count.value)()
vk.vkEnumeratePhysicalDevices(instance, C.byref(count), devices)
vk.vkGetInstanceProcAddr.restype = ptr
query = vk.vkGetInstanceProcAddr(instance, b"vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
for device in devices:
    props = C.create_string_buffer(1024)
    vk.vkGetPhysicalDeviceProperties(ptr(device), props)
    print("device:", props.raw[20:276].split(b"\0")[0].decode())
    if not query:
        print("  no vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
        continue
    fn = C.CFUNCTYPE(C.c_int32, ptr, C.POINTER(u32), C.POINTER(CoopProps))(query)
    n = u32()
    if fn(ptr(device), C.byref(n), None) != 0:
        print("  query failed")
        continue
    configs = (CoopProps * n.value)(*[CoopProps(1000506001) for _ in range(n.value)])
    fn(ptr(device), C.byref(n), configs)
    print(f"  {n.value} cooperative-matrix configurations")
    for p in configs:
        print(f"  {p.m}x{p.n}x{p.k} A={TYPES.get(p.a, p.a)} B={TYPES.get(p.b, p.b)} "
              f"C={TYPES.get(p.c, p.c)} R={TYPES.get(p.result, p.result)} "
              f"scope={SCOPES.get(p.scope, p.scope)} saturating={p.saturating}")
