//! Fuzzing on the stable toolchain: a seeded mutation loop run in a test binary.
//!
//! cargo-fuzz needs nightly's sanitizer flags; CI has only stable. So each target is a plain
//! function of bytes, and [`run_mutations`] feeds it mutants of its corpus for a wall-clock
//! budget, as libFuzzer would minus coverage feedback: the mutators know the input's shape
//! instead ([`Shape`]: GGUF header fields and metadata integers, JSON nodes, template text),
//! which is where the settings, templates and packets this fuzzes are read from.
//!
//! Every input must end in `Ok` or an error. What counts as a failure, and what is kept of it:
//! - a panic: caught, the input saved (`FAK_FUZZ_FAILURES`, default `<tmp>/fak-fuzz-failures`),
//!   the loop goes on and the test fails at the end naming every saved file;
//! - an abort (an allocation failure, a stack overflow): [`install_failure_dump`] writes the
//!   input being run from the SIGABRT handler before the process dies;
//! - a huge allocation: [`CappedAlloc`] (the binary's global allocator) refuses any single
//!   allocation over 1 GiB, so an allocation sized from a forged count aborts (and is dumped)
//!   instead of paging the machine to death;
//! - a hang: a watchdog thread dumps the input and aborts when one run takes over 20 s.
//!
//! `FAK_FUZZ_SECONDS` sets the budget per target (default 60, CI's; 600 for the long runs that
//! experiments/NOTES.md records), `FAK_FUZZ_SEED` the RNG seed (default: from the clock, printed
//! so a run can be repeated).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value as Json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The largest single allocation a fuzzed input may cause.
pub const MAX_ALLOCATION: usize = 1 << 30;
/// How long one input may run before it counts as a hang.
pub const HANG_LIMIT: Duration = Duration::from_secs(20);

/// What the inputs of a target are, so the mutations stay mostly well-formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A GGUF file: mutations favour the header, metadata integers and tensor-info fields.
    Gguf,
    /// A JSON document: mutations replace, drop and duplicate nodes, and edit strings as text.
    Json,
}

/// A fuzz target: a name (its corpus folder under `fuzz/corpus/`), the input shape, words the
/// text mutations insert, and the function every input must survive.
pub struct Target {
    pub name: &'static str,
    pub shape: Shape,
    pub dictionary: &'static [&'static str],
    pub run: fn(&[u8]),
}

/// What a mutation run did.
#[derive(Debug, Default)]
pub struct Stats {
    pub executions: u64,
    /// Inputs that panicked, saved to these files.
    pub failures: Vec<PathBuf>,
}

/// The committed corpus of `target`: every file of `fuzz/corpus/<name>/` (inputs that once
/// failed, kept as regressions), sorted by name; none when the folder does not exist.
pub fn corpus(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// Runs every input once; a panic fails with the input's name.
pub fn replay(target: &Target, inputs: &[(PathBuf, Vec<u8>)]) {
    for (path, bytes) in inputs {
        if let Err(why) = run_one(target, bytes) {
            panic!("{}: {} panicked: {why}", target.name, path.display());
        }
    }
}

/// The mutation budget per target: `FAK_FUZZ_SECONDS`, default 60.
pub fn budget() -> Duration {
    let seconds = std::env::var("FAK_FUZZ_SECONDS")
        .ok()
        .map(|s| s.parse::<u64>().expect("FAK_FUZZ_SECONDS: whole seconds"))
        .unwrap_or(60);
    Duration::from_secs(seconds)
}

/// The RNG seed: `FAK_FUZZ_SEED`, else the clock.
pub fn seed() -> u64 {
    match std::env::var("FAK_FUZZ_SEED") {
        Ok(s) => s.parse().expect("FAK_FUZZ_SEED: an integer"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}

/// Feeds `target` mutants of `seeds` until `budget` has passed; returns how many ran and the
/// inputs that panicked (saved to files).
pub fn run_mutations(target: &Target, seeds: &[Vec<u8>], budget: Duration, seed: u64) -> Stats {
    assert!(!seeds.is_empty(), "{}: no seeds", target.name);
    install_failure_dump();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let hot: Vec<HotSpots> = seeds
        .iter()
        .map(|s| HotSpots::of(target.shape, s))
        .collect();
    let mut stats = Stats::default();
    let start = Instant::now();
    while start.elapsed() < budget {
        let pick = rng.random_range(0..seeds.len());
        let mut input = seeds[pick].clone();
        if target.shape == Shape::Gguf && rng.random_bool(0.3) {
            retype_gguf(&mut rng, &mut input, &hot[pick], target.dictionary);
        }
        for _ in 0..rng.random_range(1..=4) {
            match target.shape {
                Shape::Gguf => mutate_gguf(&mut rng, &mut input, &hot[pick], seeds),
                Shape::Json => mutate_json(&mut rng, &mut input, target.dictionary),
            }
        }
        stats.executions += 1;
        if let Err(why) = run_one(target, &input) {
            let path = save_failure(target.name, &input);
            eprintln!(
                "{}: panic ({why}); input saved to {}",
                target.name,
                path.display()
            );
            stats.failures.push(path);
        }
    }
    stats
}

/// One input under the watchdog, with the input published for the abort handler; a panic's
/// message on failure.
fn run_one(target: &Target, input: &[u8]) -> Result<(), String> {
    CURRENT.with(|c| c.set((input.as_ptr(), input.len())));
    let slot = watch_slot(target.name);
    slot.started_ms.store(now_ms(), Ordering::Relaxed);
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    slot.started_ms.store(0, Ordering::Relaxed);
    CURRENT.with(|c| c.set((std::ptr::null(), 0)));
    result.map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "non-string panic".into())
    })
}

/// Where failing inputs are saved: `FAK_FUZZ_FAILURES`, else `<tmp>/fak-fuzz-failures`.
fn failures_dir() -> PathBuf {
    let dir = std::env::var_os("FAK_FUZZ_FAILURES").map_or_else(
        || std::env::temp_dir().join("fak-fuzz-failures"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).expect("creating the fuzz failure folder");
    dir
}

fn save_failure(target: &str, input: &[u8]) -> PathBuf {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(input);
    let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let path = failures_dir().join(format!("{target}-{name}"));
    std::fs::write(&path, input).expect("saving a failing input");
    path
}

// --- aborts and hangs ---------------------------------------------------------------------

/// Refuses any single allocation over [`MAX_ALLOCATION`] (the allocation then fails, which
/// aborts with "memory allocation of N bytes failed" and, through [`install_failure_dump`],
/// saves the input). A fuzz binary installs it: `#[global_allocator] static A: CappedAlloc =
/// CappedAlloc;`.
pub struct CappedAlloc;

// SAFETY: every call is forwarded to the system allocator unchanged, or refused with null
// (what an allocator returns when it cannot serve a request).
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match layout.size() > MAX_ALLOCATION {
            true => std::ptr::null_mut(),
            // SAFETY: forwarded with the caller's guarantees.
            false => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match layout.size() > MAX_ALLOCATION {
            true => std::ptr::null_mut(),
            // SAFETY: forwarded with the caller's guarantees.
            false => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match new_size > MAX_ALLOCATION {
            true => std::ptr::null_mut(),
            // SAFETY: forwarded with the caller's guarantees.
            false => unsafe { System.realloc(ptr, layout, new_size) },
        }
    }
}

thread_local! {
    /// The input this thread is running, for the SIGABRT handler (const-initialised, so reading
    /// it in a signal handler allocates nothing).
    static CURRENT: Cell<(*const u8, usize)> = const { Cell::new((std::ptr::null(), 0)) };
}

/// Where the abort handler writes the input (made before any abort can happen).
static ABORT_DUMP: OnceLock<std::ffi::CString> = OnceLock::new();

/// Installs (once) a SIGABRT handler that writes the input the aborting thread was running to
/// `<failures>/aborted-input` before the process dies, and says so on stderr.
pub fn install_failure_dump() {
    ABORT_DUMP.get_or_init(|| {
        let path = failures_dir().join("aborted-input");
        let path = std::ffi::CString::new(path.to_str().expect("a UTF-8 path")).unwrap();
        let handler: extern "C" fn(libc::c_int) = on_abort;
        // SAFETY: the handler calls only async-signal-safe functions (open, write, close,
        // signal, raise).
        unsafe { libc::signal(libc::SIGABRT, handler as libc::sighandler_t) };
        path
    });
}

extern "C" fn on_abort(_: libc::c_int) {
    let (ptr, len) = CURRENT.with(Cell::get);
    if let Some(path) = ABORT_DUMP.get()
        && !ptr.is_null()
    {
        let note = b"\nfuzz: the input being run when the process aborted is saved as ";
        // SAFETY: async-signal-safe calls on a path and a buffer that outlive the handler.
        unsafe {
            let fd = libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o644,
            );
            if fd >= 0 {
                libc::write(fd, ptr.cast(), len);
                libc::close(fd);
            }
            libc::write(2, note.as_ptr().cast(), note.len());
            libc::write(2, path.as_ptr().cast(), path.as_bytes().len());
            libc::write(2, b"\n".as_ptr().cast(), 1);
        }
    }
    // SAFETY: back to the default action, then re-raised: the process ends as aborted.
    unsafe {
        libc::signal(libc::SIGABRT, libc::SIG_DFL);
        libc::raise(libc::SIGABRT);
    }
}

/// A fuzzing thread as the watchdog sees it.
struct WatchSlot {
    thread: libc::pthread_t,
    target: &'static str,
    /// When the current input started ([`now_ms`]); 0 between inputs.
    started_ms: AtomicU64,
}

static SLOTS: std::sync::Mutex<Vec<Arc<WatchSlot>>> = std::sync::Mutex::new(Vec::new());

thread_local! {
    static SLOT: OnceLock<Arc<WatchSlot>> = const { OnceLock::new() };
}

/// This thread's slot, registered (and the watchdog started) on first use.
fn watch_slot(target: &'static str) -> Arc<WatchSlot> {
    SLOT.with(|slot| {
        slot.get_or_init(|| {
            static WATCHDOG: OnceLock<()> = OnceLock::new();
            WATCHDOG.get_or_init(|| {
                std::thread::spawn(watchdog);
            });
            let s = Arc::new(WatchSlot {
                // SAFETY: pthread_self has no preconditions.
                thread: unsafe { libc::pthread_self() },
                target,
                started_ms: AtomicU64::new(0),
            });
            SLOTS.lock().unwrap().push(s.clone());
            s
        })
        .clone()
    })
}

/// Milliseconds since the first call, never 0.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Every half second: a thread whose input has run past [`HANG_LIMIT`] gets SIGABRT, whose
/// handler runs on that thread and so saves the input it hangs on.
fn watchdog() {
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let slots = SLOTS.lock().unwrap().clone();
        for slot in slots {
            let started = slot.started_ms.load(Ordering::Relaxed);
            if started != 0 && now_ms() - started > HANG_LIMIT.as_millis() as u64 {
                eprintln!(
                    "fuzz: {}: one input has run for over {} s: a hang",
                    slot.target,
                    HANG_LIMIT.as_secs()
                );
                // SAFETY: the thread registered itself and never exits while fuzzing.
                unsafe { libc::pthread_kill(slot.thread, libc::SIGABRT) };
            }
        }
    }
}

// --- mutations ----------------------------------------------------------------------------

/// Values that break size arithmetic, by width in bytes.
fn interesting(rng: &mut ChaCha8Rng, width: usize, current: u64) -> u64 {
    const WIDE: [u64; 16] = [
        0,
        1,
        2,
        3,
        0x7f,
        0x80,
        0xff,
        0xffff,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_ffff,
        1 << 32,
        1 << 60,
        1 << 62,
        i64::MAX as u64,
        u64::MAX,
    ];
    let v = match rng.random_range(0..4) {
        0 => current.wrapping_add(1),
        1 => current.wrapping_sub(1),
        2 => current.wrapping_mul(2),
        _ => WIDE[rng.random_range(0..WIDE.len())],
    };
    match width {
        8 => v,
        _ => v & ((1u64 << (8 * width)) - 1),
    }
}

fn read_le(bytes: &[u8], at: usize, width: usize) -> u64 {
    let mut v = [0u8; 8];
    v[..width].copy_from_slice(&bytes[at..at + width]);
    u64::from_le_bytes(v)
}

fn write_le(bytes: &mut [u8], at: usize, width: usize, v: u64) {
    bytes[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
}

/// Where a GGUF seed keeps its integers: header counts, metadata integer values and array
/// lengths, tensor-info dimensions, types and offsets (`(offset, width)`), and where its header
/// ends (the tensor data, which nothing but a tensor read looks at, follows).
pub struct HotSpots {
    spots: Vec<(usize, usize)>,
    /// Where the values of u32 scalars are (what [`retype_gguf`] widens to u64).
    u32_values: Vec<usize>,
    /// Where the key/value pairs end (the first tensor info starts).
    kv_end: Option<usize>,
    header_end: usize,
}

impl HotSpots {
    fn of(shape: Shape, bytes: &[u8]) -> HotSpots {
        let Ok(parsed) = (match shape {
            Shape::Gguf => fak::gguf::parse(bytes),
            Shape::Json => Err(fak::gguf::ParseError::BigEndian),
        }) else {
            return HotSpots {
                spots: Vec::new(),
                u32_values: Vec::new(),
                kv_end: None,
                header_end: bytes.len(),
            };
        };
        let mut spots = vec![(4, 4), (8, 8), (16, 8)];
        let mut u32_values = Vec::new();
        // A key or name as stored: its u64 length, then its bytes.
        let find = |name: &str| {
            let mut needle = (name.len() as u64).to_le_bytes().to_vec();
            needle.extend_from_slice(name.as_bytes());
            bytes
                .windows(needle.len())
                .position(|w| w == needle.as_slice())
                .map(|at| at + needle.len())
        };
        for (key, value) in &parsed.metadata {
            let Some(after) = find(key) else { continue };
            let at = after + 4;
            let width = match value {
                fak::gguf::Value::U8(_) | fak::gguf::Value::I8(_) => 1,
                fak::gguf::Value::U16(_) | fak::gguf::Value::I16(_) => 2,
                fak::gguf::Value::U32(_) | fak::gguf::Value::I32(_) | fak::gguf::Value::F32(_) => 4,
                fak::gguf::Value::U64(_) | fak::gguf::Value::I64(_) | fak::gguf::Value::F64(_) => 8,
                // The element count, after the element type.
                fak::gguf::Value::Array(_) => {
                    spots.push((at + 4, 8));
                    continue;
                }
                _ => continue,
            };
            if matches!(value, fak::gguf::Value::U32(_)) {
                u32_values.push(at);
            }
            spots.push((at, width));
        }
        let kv_end = parsed
            .tensors
            .first()
            .and_then(|t| find(&t.name).map(|after| after - t.name.len() - 8));
        for t in &parsed.tensors {
            let Some(at) = find(&t.name) else { continue };
            spots.push((at, 4));
            let dims_end = at + 4 + 8 * t.shape.len();
            spots.extend((at + 4..dims_end).step_by(8).map(|d| (d, 8)));
            spots.push((dims_end, 4));
            spots.push((dims_end + 4, 8));
        }
        spots.retain(|&(at, w)| at + w <= bytes.len());
        u32_values.retain(|&at| at + 4 <= bytes.len());
        HotSpots {
            spots,
            u32_values,
            kv_end,
            header_end: parsed.data_start.min(bytes.len() as u64) as usize,
        }
    }
}

/// GGUF's type id of u64 values.
const GGUF_U64: u32 = 10;
/// The data section's alignment in the seeds (GGUF's default).
const GGUF_ALIGNMENT: usize = 32;

/// A mutation a byte edit cannot make, on a pristine seed: a u32 setting rewritten as a u64 of
/// an interesting value (files store settings as u32; a hostile one needs 2^62), or a key of the
/// dictionary added as a u64. The header grows by a multiple of the alignment (zero padding
/// before the data), so the file still parses and the mutant reaches the settings.
fn retype_gguf(rng: &mut ChaCha8Rng, input: &mut Vec<u8>, hot: &HotSpots, keys: &[&str]) {
    let big = |rng: &mut ChaCha8Rng| {
        let powers = [31, 32, 40, 60, 62, 63];
        (1u64 << powers[rng.random_range(0..powers.len())]).wrapping_add(rng.random_range(0..3))
    };
    let (at, bytes) = match (rng.random_bool(0.6), hot.kv_end) {
        (true, _) | (false, None) if !hot.u32_values.is_empty() => {
            let at = hot.u32_values[rng.random_range(0..hot.u32_values.len())];
            let value = match rng.random_bool(0.8) {
                true => big(rng),
                false => u64::MAX,
            };
            input[at - 4..at].copy_from_slice(&GGUF_U64.to_le_bytes());
            input.splice(at..at + 4, value.to_le_bytes());
            (at, 4)
        }
        (_, Some(kv_end)) if !keys.is_empty() => {
            let key = keys[rng.random_range(0..keys.len())];
            let mut kv = (key.len() as u64).to_le_bytes().to_vec();
            kv.extend_from_slice(key.as_bytes());
            kv.extend_from_slice(&GGUF_U64.to_le_bytes());
            kv.extend_from_slice(&big(rng).to_le_bytes());
            let n_kv = read_le(input, 16, 8);
            write_le(input, 16, 8, n_kv + 1);
            let n = kv.len();
            input.splice(kv_end..kv_end, kv);
            (kv_end, n)
        }
        _ => return,
    };
    let pad = (GGUF_ALIGNMENT - bytes % GGUF_ALIGNMENT) % GGUF_ALIGNMENT;
    let data = (hot.header_end + bytes).max(at).min(input.len());
    input.splice(data..data, std::iter::repeat_n(0u8, pad));
}

/// An offset in `0..end` (an empty input has none).
fn offset(rng: &mut ChaCha8Rng, end: usize) -> Option<usize> {
    (end > 0).then(|| rng.random_range(0..end))
}

/// One mutation of a GGUF input, most of them in its header.
fn mutate_gguf(rng: &mut ChaCha8Rng, input: &mut Vec<u8>, hot: &HotSpots, seeds: &[Vec<u8>]) {
    let header = hot.header_end.min(input.len());
    match rng.random_range(0..100) {
        0..45 if !hot.spots.is_empty() => {
            let (at, width) = hot.spots[rng.random_range(0..hot.spots.len())];
            if at + width <= input.len() {
                let v = interesting(rng, width, read_le(input, at, width));
                write_le(input, at, width, v);
            }
        }
        0..75 => mutate_bytes(rng, input, header),
        75..85 => {
            if let (Some(a), Some(n)) = (offset(rng, header), offset(rng, 64)) {
                let end = (a + n).min(input.len());
                match rng.random_bool(0.5) {
                    true => drop(input.drain(a..end)),
                    false => {
                        let span = input[a..end].to_vec();
                        input.splice(a..a, span);
                    }
                }
            }
        }
        85..90 => {
            if let Some(n) = offset(rng, input.len()) {
                input.truncate(n);
            }
        }
        90..95 => {
            let other = &seeds[rng.random_range(0..seeds.len())];
            if let (Some(a), Some(b)) = (offset(rng, input.len()), offset(rng, other.len())) {
                input.truncate(a);
                input.extend_from_slice(&other[b..]);
            }
        }
        _ => {
            let len = input.len();
            mutate_bytes(rng, input, len);
        }
    }
}

/// A bit flip, a random byte or an interesting integer somewhere in `input[..end]`.
fn mutate_bytes(rng: &mut ChaCha8Rng, input: &mut [u8], end: usize) {
    let Some(at) = offset(rng, end) else { return };
    match rng.random_range(0..3) {
        0 => input[at] ^= 1 << rng.random_range(0..8),
        1 => input[at] = rng.random(),
        _ => {
            let width = [1, 2, 4, 8][rng.random_range(0..4)];
            if at + width <= input.len() {
                let v = interesting(rng, width, read_le(input, at, width));
                write_le(input, at, width, v);
            }
        }
    }
}

/// One mutation of a JSON input: a node replaced, dropped or duplicated, or a string edited as
/// text (a string that is itself JSON — a file of a packet bundle — mutated as JSON); now and
/// then the bytes themselves, so malformed JSON is fed too.
fn mutate_json(rng: &mut ChaCha8Rng, input: &mut Vec<u8>, dictionary: &[&str]) {
    let parsed: Option<Json> = serde_json::from_slice(input).ok();
    match parsed {
        Some(mut doc) if rng.random_range(0..20) != 0 => {
            mutate_node(rng, &mut doc, dictionary, 0);
            *input = serde_json::to_vec(&doc).expect("JSON serialises");
        }
        _ => {
            let len = input.len();
            mutate_bytes(rng, input, len);
        }
    }
}

/// Walks to a random node of `v` and mutates it.
fn mutate_node(rng: &mut ChaCha8Rng, v: &mut Json, dictionary: &[&str], depth: usize) {
    // Descend with a probability that keeps shallow and deep nodes both reachable.
    let descend = depth < 32 && rng.random_range(0..4) != 0;
    match v {
        Json::Array(items) if descend && !items.is_empty() => {
            let i = rng.random_range(0..items.len());
            return mutate_node(rng, &mut items[i], dictionary, depth + 1);
        }
        Json::Object(map) if descend && !map.is_empty() => {
            let i = rng.random_range(0..map.len());
            let key = map.keys().nth(i).expect("in range").clone();
            return mutate_node(
                rng,
                map.get_mut(&key).expect("present"),
                dictionary,
                depth + 1,
            );
        }
        _ => {}
    }
    match v {
        Json::Number(n) => {
            let current = n.as_f64().unwrap_or(0.0);
            *v = match rng.random_range(0..8) {
                0 => Json::from(u64::MAX),
                1 => Json::from(i64::MIN),
                2 => Json::from(1e308),
                3 => Json::from(-current),
                4 => Json::from(current * 2.0 + 1.0),
                5 => Json::from(0),
                6 => Json::from(interesting(rng, 8, current as u64)),
                _ => Json::from(0.5),
            };
        }
        Json::String(text) => {
            if rng.random_bool(0.7)
                && let Ok(mut inner) = serde_json::from_str::<Json>(text)
                && (inner.is_object() || inner.is_array())
            {
                mutate_node(rng, &mut inner, dictionary, 0);
                *text = inner.to_string();
            } else {
                mutate_text(rng, text, dictionary);
            }
        }
        Json::Bool(b) => *b = !*b,
        Json::Null => *v = Json::from(0),
        Json::Array(items) => match (rng.random_range(0..3), items.len()) {
            (_, 0) | (0, _) => items.clear(),
            (1, n) => drop(items.remove(rng.random_range(0..n))),
            (_, n) => {
                let copy = items[rng.random_range(0..n)].clone();
                items.insert(rng.random_range(0..=n), copy);
            }
        },
        Json::Object(map) => {
            if let Some(i) = offset(rng, map.len()) {
                let key = map.keys().nth(i).expect("in range").clone();
                map.remove(&key);
            }
        }
    }
}

/// Text edits: a dictionary word inserted, a span deleted or repeated, the whole replaced.
fn mutate_text(rng: &mut ChaCha8Rng, text: &mut String, dictionary: &[&str]) {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let at = bounds[rng.random_range(0..bounds.len())];
    let to = bounds[rng.random_range(0..bounds.len())];
    let (a, b) = (at.min(to), at.max(to));
    let word = match dictionary.is_empty() {
        true => "\u{0}",
        false => dictionary[rng.random_range(0..dictionary.len())],
    };
    match rng.random_range(0..5) {
        0 | 1 => text.insert_str(at, word),
        2 => text.replace_range(a..b, ""),
        3 => {
            let span = text[a..b].repeat(rng.random_range(2..8));
            text.replace_range(a..b, &span);
        }
        _ => *text = word.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_deterministic_per_seed() {
        let seed_input = br#"{"a": [1, "x", {"b": true}]}"#.to_vec();
        let run = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut input = seed_input.clone();
            for _ in 0..50 {
                mutate_json(&mut rng, &mut input, &["{{"]);
            }
            input
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }
}
