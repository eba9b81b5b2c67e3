//! The engine's one-way layers, checked: every `crate::` path (and every `super::` path that
//! climbs to the crate root) in an engine source file names a module its own module may import,
//! per the table in docs/ARCHITECTURE.md ("Layers"), which this test reads. A violation is
//! named with its file, line, the module imported and what the importing module may import.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DOC: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../docs/ARCHITECTURE.md"
));

/// The table between `<!-- layers -->` and `<!-- /layers -->`: rows `| `module` | `a`, `b` |`
/// (`—` for none), module → what it may import.
fn layer_table(doc: &str) -> BTreeMap<String, Vec<String>> {
    let start = doc
        .find("<!-- layers -->")
        .expect("docs/ARCHITECTURE.md: no <!-- layers -->");
    let end = doc
        .find("<!-- /layers -->")
        .expect("docs/ARCHITECTURE.md: no <!-- /layers -->");
    let names = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    doc[start..end]
        .lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let module = names(cells.get(1)?).into_iter().next()?;
            Some((module, names(cells.get(2)?)))
        })
        .collect()
}

/// One place a file refers to a top-level module of the crate.
#[derive(Debug, PartialEq, Eq)]
struct Import {
    line: usize,
    module: String,
}

/// The top-level modules `source` refers to through `crate::` paths (`crate::a::…`,
/// `crate::{a::…, b}`) and `super::` paths that climb `depth` levels to the crate root, outside
/// comments.
fn imports(source: &str, depth: usize) -> Vec<Import> {
    let mut out = Vec::new();
    for (i, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = find_path_start(rest) {
            let (prefix_len, climbs) = at.1;
            let after = &rest[at.0 + prefix_len..];
            if climbs >= depth {
                for module in first_segments(after) {
                    out.push(Import {
                        line: i + 1,
                        module,
                    });
                }
            }
            rest = after;
        }
    }
    out
}

/// The next `crate::` (or run of `super::`) in `code` not preceded by an identifier character
/// or `$`: its byte offset, its length and how many levels it climbs (`usize::MAX` for
/// `crate::`).
fn find_path_start(code: &str) -> Option<(usize, (usize, usize))> {
    let bytes = code.as_bytes();
    let starts_word = |at: usize| {
        at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || matches!(bytes[at - 1], b'_' | b'$'))
    };
    let mut at = 0;
    while at < code.len() {
        let tail = &code[at..];
        if tail.starts_with("crate::") && starts_word(at) {
            return Some((at, ("crate::".len(), usize::MAX)));
        }
        if tail.starts_with("super::") && starts_word(at) {
            let mut len = 0;
            while tail[len..].starts_with("super::") {
                len += "super::".len();
            }
            return Some((at, (len, len / "super::".len())));
        }
        at += tail.chars().next().map_or(1, char::len_utf8);
    }
    None
}

/// The first path segment after `crate::`: one identifier, or each item's first identifier in
/// a `{…}` group.
fn first_segments(after: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = after.strip_prefix('{') else {
        return vec![ident(after)];
    };
    let mut items = Vec::new();
    let (mut nesting, mut item_start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => nesting += 1,
            '}' if nesting == 0 => {
                items.push(&group[item_start..i]);
                break;
            }
            '}' => nesting -= 1,
            ',' if nesting == 0 => {
                items.push(&group[item_start..i]);
                item_start = i + 1;
            }
            _ => {}
        }
    }
    items
        .into_iter()
        .map(ident)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading the engine sources") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_engine_file_imports_only_the_layers_below_its_own() {
    let table = layer_table(DOC);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let top: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    for module in &top {
        assert!(
            table.contains_key(*module),
            "module {module} has no row in the layer table of docs/ARCHITECTURE.md"
        );
    }
    let mut files = Vec::new();
    for module in &top {
        let dir = root.join(module);
        match dir.is_dir() {
            true => sources(&dir, &mut files),
            false => files.push(root.join(format!("{module}.rs"))),
        }
    }
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(root).unwrap();
        let parts: Vec<&str> = rel.iter().map(|p| p.to_str().unwrap()).collect();
        let own = parts[0].trim_end_matches(".rs");
        // The module path's length: engine/gpu/kernels/rope.rs is gpu::kernels::rope (3),
        // engine/gpu/step/mod.rs is gpu::step (2).
        let depth = parts.len() - usize::from(parts.last() == Some(&"mod.rs"));
        let allowed = &table[own];
        let source = std::fs::read_to_string(file).unwrap();
        for import in imports(&source, depth) {
            if import.module == own || !table.contains_key(&import.module) {
                continue;
            }
            if !allowed.contains(&import.module) {
                violations.push(format!(
                    "engine/{}:{}: imports {}; {own} may import only {}",
                    rel.display(),
                    import.line,
                    import.module,
                    match allowed.is_empty() {
                        true => "nothing".to_owned(),
                        false => allowed.join(", "),
                    }
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against the layers of docs/ARCHITECTURE.md:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_import_scan_sees_grouped_nested_and_climbing_paths() {
    let source = "use crate::gpu::GpuError;\n\
                  use crate::{model::Arch, quant::{self, GgmlType}};\n\
                  // use crate::runtime::Engine;\n\
                  let v = crate::reference::ops::dot(a, b); // crate::cache\n\
                  use super::super::tokenizer::Tokenizer;\n\
                  use super::sibling;\n\
                  $crate::gguf::x; my_crate::cache::y;\n";
    let got: Vec<(usize, String)> = imports(source, 2)
        .into_iter()
        .map(|i| (i.line, i.module))
        .collect();
    let want = [
        (1, "gpu"),
        (2, "model"),
        (2, "quant"),
        (4, "reference"),
        (5, "tokenizer"),
    ]
    .map(|(l, m)| (l, m.to_owned()));
    assert_eq!(got, want);
}

#[test]
fn the_layer_table_is_read_from_the_doc() {
    let doc = "x\n<!-- layers -->\n| module | may import |\n|---|---|\n| `quant` | — |\n\
               | `gpu` | `quant`, `gguf` |\n<!-- /layers -->\n| `cache` | `gpu` |\n";
    let table = layer_table(doc);
    assert_eq!(table.len(), 2, "{table:?}");
    assert!(table["quant"].is_empty());
    assert_eq!(table["gpu"], ["quant", "gguf"]);
}
