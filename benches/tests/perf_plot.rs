//! `tandem-perf --plot` and `--compare`: the built binary draws a short
//! sweep into a well-formed SVG with a curve in each panel.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// Runs of the sweep one at a time: each pins two ranks to the same two
/// cores.
static SWEEP: Mutex<()> = Mutex::new(());

/// A fresh directory under the system's temporary one.
fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-perf-plot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn perf(args: &[&str]) -> Output {
    let _one = SWEEP.lock().unwrap_or_else(|e| e.into_inner());
    Command::new(env!("CARGO_BIN_EXE_tandem-perf"))
        .args(args)
        .output()
        .expect("run tandem-perf")
}

fn sweep(extra: &[&str]) -> Output {
    let mut args = vec![
        "pingpong",
        "--min-size",
        "1",
        "--max-size",
        "64",
        "--iters",
        "200",
    ];
    args.extend_from_slice(extra);
    let out = perf(&args);
    assert!(
        out.status.success(),
        "tandem-perf failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The polylines of the SVG at `path` (parsed as XML, root `<svg>`): the
/// number of points of each and whether it lies in the left half.
fn polylines(path: &Path) -> (Vec<(usize, bool)>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let width: f64 = root.attribute("width").unwrap().parse().unwrap();
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| {
            let xs: Vec<f64> = n
                .attribute("points")
                .unwrap()
                .split_whitespace()
                .map(|p| p.split(',').next().unwrap().parse().unwrap())
                .collect();
            let left = xs.iter().all(|x| *x < width / 2.0);
            assert!(left || xs.iter().all(|x| *x > width / 2.0), "{xs:?}");
            (xs.len(), left)
        })
        .collect();
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect();
    (lines, texts)
}

/// Whether both panels have a polyline of `n` points.
fn in_both_panels(lines: &[(usize, bool)], n: usize) -> bool {
    [true, false].iter().all(|left| lines.contains(&(n, *left)))
}

#[test]
fn plot_of_a_sweep() {
    let dir = temp_dir("plot");
    let svg = dir.join("p.svg");
    let out = sweep(&["--plot", svg.to_str().unwrap()]);
    // The table is still printed.
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("p50 us"), "{table}");
    let (lines, texts) = polylines(&svg);
    // 1 B to 64 B: 7 sizes, one curve in each panel.
    assert!(in_both_panels(&lines, 7), "{lines:?}");
    assert!(texts.iter().any(|t| t == "64 B"), "{texts:?}");
    assert_eq!(texts.iter().filter(|t| *t == "this run").count(), 2);
    for reference in ["one-way cache line", "memcpy 64M"] {
        assert!(
            texts.iter().any(|t| t.starts_with(reference)),
            "no {reference} line: {texts:?}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn plot_compared_with_earlier_runs() {
    let dir = temp_dir("compare");
    let earlier = dir.join("earlier.json");
    std::fs::write(
        &earlier,
        r#"[
  {"size": 1, "p50_us": 0.5, "p99_us": 0.6, "gbps": 0.002},
  {"size": 8, "p50_us": 0.5, "p99_us": 0.6, "gbps": 0.016},
  {"size": 64, "p50_us": 0.6, "p99_us": 0.7, "gbps": 0.107}
]"#,
    )
    .unwrap();
    // A collective's rows: bandwidth is "busbw".
    let coll = dir.join("allreduce.json");
    std::fs::write(
        &coll,
        r#"[{"size": 4, "p50_us": 2.0, "algbw": 0.002, "busbw": 0.003, "wrong": 0},
            {"size": 16, "p50_us": 2.5, "algbw": 0.006, "busbw": 0.009, "wrong": 0},
            {"size": 32, "p50_us": 2.5, "algbw": 0.012, "busbw": 0.018, "wrong": 0},
            {"size": 64, "p50_us": 3.0, "algbw": 0.02, "busbw": 0.03, "wrong": 0}]"#,
    )
    .unwrap();
    let svg = dir.join("c.svg");
    let out = sweep(&[
        "--json",
        "--plot",
        svg.to_str().unwrap(),
        "--compare",
        earlier.to_str().unwrap(),
        "--compare",
        coll.to_str().unwrap(),
    ]);
    // stdout stays one JSON document, which --compare reads back.
    let json = dir.join("now.json");
    std::fs::write(&json, &out.stdout).unwrap();
    let (lat, bw) = tandem_benches::plot::read_json_series(&json).unwrap();
    assert_eq!((lat.len(), bw.len()), (7, 7));

    let (lines, texts) = polylines(&svg);
    assert!(in_both_panels(&lines, 7), "{lines:?}");
    assert!(in_both_panels(&lines, 3), "{lines:?}");
    assert!(in_both_panels(&lines, 4), "{lines:?}");
    for label in ["this run", "earlier", "allreduce"] {
        assert_eq!(
            texts.iter().filter(|t| *t == label).count(),
            2,
            "{label} in both legends: {texts:?}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_plot_options_fail_before_the_sweep() {
    let dir = temp_dir("bad");
    let svg = dir.join("x.svg");
    let svg = svg.to_str().unwrap();
    let missing = dir.join("missing.json");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"c2c_rtt_ns": 1.0}"#).unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--compare", bad.to_str().unwrap()],
            "--compare needs --plot",
        ),
        (
            &["--plot", svg, "--compare", missing.to_str().unwrap()],
            "missing.json",
        ),
        (
            &["--plot", svg, "--compare", bad.to_str().unwrap()],
            "expected a JSON array",
        ),
        (&["--plot"], "--plot needs a value"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["pingpong"];
        args.extend_from_slice(extra);
        let out = perf(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert!(!Path::new(svg).exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn collective_sweep_table_json_and_plot() {
    let dir = temp_dir("coll");
    let svg = dir.join("a.svg");
    let out = perf(&[
        "allreduce",
        "-n",
        "3",
        "--max-size",
        "4K",
        "--iters",
        "100",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The header (with the reduction kernel beside memcpy) goes to stderr.
    assert!(err.contains("reduction kernel"), "{err}");
    // stdout is one JSON array of nccl-tests-like rows, none wrong.
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 10, "8 B .. 4 KiB: {rows:?}");
    for r in rows {
        for k in ["size", "p50_us", "algbw", "busbw", "wrong"] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
        assert_eq!(r["wrong"], 0, "{r}");
        assert!(r["p50_us"].as_f64().unwrap() > 0.0);
    }
    let (lines, texts) = polylines(&svg);
    assert!(in_both_panels(&lines, 10), "{lines:?}");
    assert!(texts.iter().any(|t| t.starts_with("busbw")), "{texts:?}");
    // The table form has nccl-tests' columns.
    let out = perf(&[
        "reduce",
        "--max-size",
        "64",
        "--iters",
        "50",
        "--type",
        "bf16",
        "--op",
        "max",
        "--root",
        "1",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for col in [
        "size", "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong",
    ] {
        assert!(table.contains(col), "{col}: {table}");
    }
    assert!(
        table.contains("bfloat16") && table.contains("max"),
        "{table}"
    );
    // Bad collective options are errors before anything runs.
    for (args, want) in [
        (&["allreduce", "--type", "float8"][..], "unknown --type"),
        (&["allreduce", "--op", "avg"][..], "unknown --op"),
        (&["allreduce", "-n", "0"][..], "-n must be"),
    ] {
        let out = perf(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(want),
            "{args:?}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn plot_subcommand_draws_files_without_running() {
    let dir = temp_dir("plotonly");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    for p in [&a, &b] {
        std::fs::write(
            p,
            r#"[{"size": 8, "p50_us": 0.2, "algbw": 0.04, "busbw": 0.04, "wrong": 0},
                {"size": 1024, "p50_us": 0.6, "algbw": 1.7, "busbw": 1.7, "wrong": 0}]"#,
        )
        .unwrap();
    }
    let svg = dir.join("p.svg");
    // One --compare followed by two files.
    let out = perf(&[
        "plot",
        "--plot",
        svg.to_str().unwrap(),
        "--title",
        "two runs",
        "--ref-lat",
        "floor=0.05",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (lines, texts) = polylines(&svg);
    assert!(in_both_panels(&lines, 2), "{lines:?}");
    for label in ["a", "b"] {
        assert_eq!(
            texts.iter().filter(|t| *t == label).count(),
            2,
            "{label}: {texts:?}"
        );
    }
    assert!(texts.iter().any(|t| t == "floor"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "two runs"), "{texts:?}");
    // Without --plot it is an error, not a silent no-op.
    assert_eq!(perf(&["plot"]).status.code(), Some(2));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn persistent_pingpong_summary_and_json() {
    // The table's summary line names persistent requests and gives the
    // 8 B p99/p50; the JSON carries the in-run cache-line reading for
    // small sizes and nothing for larger ones.
    let out = sweep(&["--persistent"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("# 8 B half round trip"))
        .unwrap_or_else(|| panic!("no 8 B summary line in:\n{text}"));
    assert!(line.contains("persistent requests"), "{line}");
    let ratio: f64 = line
        .rsplit("p99/p50 = ")
        .next()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no p99/p50 in {line}"));
    assert!(ratio >= 1.0, "{line}");
    let out = perf(&[
        "pingpong",
        "--min-size",
        "8",
        "--max-size",
        "128",
        "--iters",
        "200",
        "--json",
    ]);
    assert!(out.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    for r in rows {
        let small = r["size"].as_u64().unwrap() <= 64;
        assert_eq!(r.get("c2c_ns").is_some(), small, "{r}");
    }
    // --persistent is for pingpong only.
    let out = perf(&["bw", "--persistent"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--persistent applies to pingpong"));
}
