//! Which test binary each test file compiles into. `tests/Cargo.toml` declares a few binaries:
//! most are groups by area (`groups/<area>.rs`, one `#[path = "../<file>.rs"] mod <file>;` per
//! file), since each binary links the engine, wgpu and naga (~30 MB of target each, 41 of them
//! 1.2 GB of CI's short disk); a file that must be alone in its process (its own allocator,
//! timing) is a binary of its own. A file in no binary would compile nowhere and never run: the test here
//! fails on one, and on one in two binaries.

use std::collections::BTreeMap;
use std::path::Path;

/// The `path = "…"` of every `[[test]]` in `tests/Cargo.toml`.
fn test_target_paths(manifest: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut in_test = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_test = line == "[[test]]";
        } else if in_test && let Some(value) = line.strip_prefix("path = ") {
            paths.push(value.trim_matches('"').to_string());
        }
    }
    paths
}

/// The files a group file includes, as paths relative to `tests/`.
fn group_members(group: &str) -> Vec<String> {
    group
        .lines()
        .filter_map(|line| line.trim().strip_prefix("#[path = \"../"))
        .map(|rest| rest.trim_end_matches("\"]").to_string())
        .collect()
}

#[test]
fn every_test_file_is_in_exactly_one_test_binary() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(tests.join("Cargo.toml")).unwrap();
    // Each test file → the binaries (by their root file) that compile it.
    let mut binaries: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for root in test_target_paths(&manifest) {
        let source = std::fs::read_to_string(tests.join(&root)).unwrap();
        let members = group_members(&source);
        if root.starts_with("groups/") {
            assert!(!members.is_empty(), "{root} includes no test file");
        }
        for file in members.into_iter().chain([root.clone()]) {
            binaries.entry(file).or_default().push(root.clone());
        }
    }
    let mut files = 0;
    for entry in std::fs::read_dir(tests).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !name.ends_with(".rs") {
            continue;
        }
        files += 1;
        match binaries.get(&name).map(Vec::as_slice) {
            Some([_]) => {}
            None | Some([]) => panic!(
                "tests/{name} is in no test binary: add it to a group in tests/groups/ \
                 (or as a [[test]] of its own in tests/Cargo.toml)"
            ),
            Some(more) => panic!("tests/{name} is compiled into several binaries: {more:?}"),
        }
    }
    assert!(
        files > 30,
        "only {files} test files found in {}",
        tests.display()
    );
}

#[test]
fn the_manifest_and_group_parsers_read_what_they_are_given() {
    let manifest =
        "[lib]\npath = \"common/mod.rs\"\n\n[[test]]\nname = \"gpu\"\npath = \"groups/gpu.rs\"\n";
    assert_eq!(test_target_paths(manifest), ["groups/gpu.rs"]);
    let group = "//! doc\n\n/// a\n#[path = \"../gpu_matvec.rs\"]\nmod gpu_matvec;\n";
    assert_eq!(group_members(group), ["gpu_matvec.rs"]);
}
