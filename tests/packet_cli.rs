//! `harness validate` as a command: its exit codes (0 valid, 1 not valid, 2 unreadable) and its
//! JSON answer. The packet checks themselves are unit-tested in the harness crate, on synthetic
//! runs tampered one invariant at a time.

use fak_tests::harness::harness;
use serde_json::Value;
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("packet_cli")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the scratch folder");
    dir
}

/// Runs `harness validate <packet> --json`: the exit code and the parsed answer.
fn validate(packet: &std::path::Path) -> (i32, Value) {
    let out = harness()
        .args(["validate", "--json"])
        .arg(packet)
        .output()
        .expect("running harness validate");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "validate --json printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(answer["schema"], "fak.macbench.comparison.validation.v1");
    (out.status.code().expect("an exit code"), answer)
}

#[test]
fn validate_exits_2_on_a_missing_packet() {
    let dir = scratch("missing");
    let (code, answer) = validate(&dir.join("packet.json"));
    assert_eq!(code, 2);
    assert_eq!(answer["valid"], false);
    assert_eq!(answer["packet_sha256"], Value::Null);
    assert!(
        answer["errors"][0]
            .as_str()
            .unwrap()
            .contains("cannot read")
    );
}

#[test]
fn validate_exits_2_on_a_corrupt_packet() {
    let dir = scratch("corrupt");
    let packet = dir.join("packet.json");
    std::fs::write(&packet, b"{\"schema\": \"fak.macbench").unwrap();
    let (code, answer) = validate(&packet);
    assert_eq!(code, 2);
    assert!(answer["errors"][0].as_str().unwrap().contains("not JSON"));
    // The digest of what was read is still given.
    assert_eq!(answer["packet_sha256"].as_str().unwrap().len(), 64);
}

#[test]
fn validate_exits_1_on_a_newer_schema() {
    let dir = scratch("newer");
    let packet = dir.join("packet.json");
    std::fs::write(&packet, br#"{"schema": "fak.macbench.comparison.v7"}"#).unwrap();
    let (code, answer) = validate(&packet);
    assert_eq!(code, 1);
    let error = answer["errors"][0].as_str().unwrap();
    assert!(
        error.contains("newer than this harness supports"),
        "{error}"
    );
}

#[test]
fn validate_exits_1_on_a_packet_that_breaks_the_schema() {
    let dir = scratch("schema");
    let packet = dir.join("packet.json");
    std::fs::write(
        &packet,
        br#"{"schema": "fak.macbench.comparison.v1", "arms": []}"#,
    )
    .unwrap();
    let (code, answer) = validate(&packet);
    assert_eq!(code, 1);
    assert!(
        answer["errors"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e.as_str().unwrap().starts_with("schema: ")),
        "{answer}"
    );
}

/// The packets committed under experiments/benchmark/runs are judged as they recorded: a change
/// to the validator that refuses an honest older packet (2026-12-06: the own-rounding reference's
/// prose was compared, not its rules) fails here.
#[test]
fn every_committed_packet_validates() {
    let runs =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../experiments/benchmark/runs/by-machine");
    let mut packets: Vec<PathBuf> = std::fs::read_dir(&runs)
        .expect("reading experiments/benchmark/runs/by-machine")
        .flat_map(|machine| std::fs::read_dir(machine.unwrap().path()).unwrap())
        .map(|run| run.unwrap().path().join("packet.json"))
        .filter(|packet| packet.is_file())
        .collect();
    packets.sort();
    assert!(
        !packets.is_empty(),
        "no committed packet under {}",
        runs.display()
    );
    for packet in &packets {
        let (code, answer) = validate(packet);
        assert_eq!(code, 0, "{}: {}", packet.display(), answer["errors"]);
    }
}
