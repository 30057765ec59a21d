//! `tandem-trace`: one job trace from the ranks' flight-recorder files.
//!
//! ```text
//! tandem-trace merge DIR [-o job.json]   put DIR/rank-*.json on one time line, arrows per message
//! tandem-trace check FILE                check a trace against the trace-event format's rules
//! tandem-trace svg FILE [-o trace.svg]   draw a (merged) trace
//! ```
//!
//! Open `job.json` in ui.perfetto.dev or chrome://tracing.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tandem-trace",
    version,
    about = "Merge, check and draw tandem's flight-recorder traces"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Merge a job's rank-<r>.json files (TANDEM_TRACE=dir) into one trace.
    Merge {
        /// The directory the ranks wrote to.
        dir: PathBuf,
        /// Where to write the job trace.
        #[arg(short, long, default_value = "job.json")]
        out: PathBuf,
    },
    /// Check a trace file against the trace-event format's rules.
    Check {
        /// A rank's or a merged trace.
        file: PathBuf,
    },
    /// Draw a trace as SVG.
    Svg {
        /// A merged trace (or one rank's).
        file: PathBuf,
        /// Where to write the picture.
        #[arg(short, long, default_value = "trace.svg")]
        out: PathBuf,
        /// Width in pixels.
        #[arg(long, default_value_t = 1200)]
        width: u32,
        /// Draw only the last this many microseconds.
        #[arg(long)]
        last_us: Option<f64>,
    },
}

fn read(file: &PathBuf) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Merge { dir, out } => {
            let ranks = tandem_trace::load_dir(&dir)?;
            let m = tandem_trace::merge(&ranks);
            let text = serde_json::to_string(&m.doc).map_err(|e| e.to_string())?;
            std::fs::write(&out, text + "\n").map_err(|e| format!("{}: {e}", out.display()))?;
            let shifts: Vec<String> = m.shift_us.iter().map(|s| format!("{s:.1}")).collect();
            println!(
                "{}: {} ranks, {} messages drawn, {} sent without an arrival in the traces; clock shifts (us): [{}]",
                out.display(),
                ranks.len(),
                m.flows,
                m.unmatched,
                shifts.join(", ")
            );
            Ok(())
        }
        Cmd::Check { file } => match tandem_trace::check(&read(&file)?) {
            Ok(s) => {
                println!(
                    "{}: valid; {} events, {} flows, {} instants, slices {:?}",
                    file.display(),
                    s.events,
                    s.flows,
                    s.instants,
                    s.slices
                );
                Ok(())
            }
            Err(errs) => Err(format!(
                "{}: invalid:\n  {}",
                file.display(),
                errs.join("\n  ")
            )),
        },
        Cmd::Svg {
            file,
            out,
            width,
            last_us,
        } => {
            let svg = tandem_trace::svg(&read(&file)?, width, last_us)?;
            std::fs::write(&out, svg).map_err(|e| format!("{}: {e}", out.display()))?;
            println!("{}", out.display());
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tandem-trace: {e}");
            ExitCode::FAILURE
        }
    }
}
