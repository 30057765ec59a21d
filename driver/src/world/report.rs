//! One hang report for the whole job: `tandem-run --report-signal` passes
//! `SIGUSR1` to every rank, each rank answers from its next wait with one
//! line of JSON on its standard error (behind [`MARK`]), the launcher's
//! output forwarders take those lines for themselves, and the supervisor
//! prints one report once every rank asked has answered or a deadline
//! has passed. Ranks on other hosts answer the same way: their standard
//! error reaches the launcher through the remote shell.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What starts a rank's report line on its standard error.
pub(crate) const MARK: &str = "tandem-report: ";

/// How long the launcher waits for every rank's answer: a rank that is
/// waiting in tandem answers within milliseconds, one computing outside
/// tandem only when it next waits.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The reports the forwarders took, by rank.
#[derive(Default, Clone)]
pub(crate) struct Collected(Arc<Mutex<Vec<(usize, Value)>>>);

impl Collected {
    /// Takes `line` (without its newline) from rank `rank`'s standard
    /// error if it is a report; `false`: an ordinary line, to be printed.
    pub(crate) fn take(&self, rank: usize, line: &[u8]) -> bool {
        let Some(body) = line.strip_prefix(MARK.as_bytes()) else {
            return false;
        };
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => {
                self.0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((rank, v));
                true
            }
            // Not ours after all: print it as it came.
            Err(_) => false,
        }
    }

    fn drain(&self) -> Vec<(usize, Value)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The supervisor's side: which ranks were asked, when, and what came.
#[derive(Default)]
pub(crate) struct Round {
    asked: Option<(Instant, Vec<usize>)>,
    got: BTreeMap<usize, Value>,
}

impl Round {
    /// A report was asked of `ranks` (those still running).
    pub(crate) fn ask(&mut self, ranks: Vec<usize>) {
        self.asked = Some((Instant::now(), ranks));
        self.got.clear();
    }

    /// Takes what the forwarders collected; the job's report once it is
    /// complete (every rank asked answered, or [`ANSWER_WITHIN`] passed),
    /// or at once for reports nobody asked the launcher for (a rank
    /// signalled by hand).
    pub(crate) fn poll(
        &mut self,
        c: &Collected,
        n: usize,
        running: impl Fn(usize) -> bool,
    ) -> Option<String> {
        for (r, v) in c.drain() {
            self.got.insert(r, v);
        }
        if let Some((t, asked)) = &self.asked {
            let all = asked
                .iter()
                .all(|&r| self.got.contains_key(&r) || !running(r));
            if !all && t.elapsed() < ANSWER_WITHIN {
                return None;
            }
        } else if self.got.is_empty() {
            return None;
        }
        // Asked: those ranks; else the ones that answered by themselves.
        let asked = match self.asked.take() {
            Some((_, a)) => a,
            None => self.got.keys().copied().collect(),
        };
        let text = merged(&self.got, &asked, n);
        self.got.clear();
        Some(text)
    }
}

/// `ranks` as "1, 4", or "none".
pub(crate) fn rank_list(ranks: &[usize]) -> String {
    if ranks.is_empty() {
        return "none".into();
    }
    let names: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    names.join(", ")
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn ranks_of(v: &Value, key: &str) -> Vec<usize> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_u64)
                .map(|r| r as usize)
                .collect()
        })
        .unwrap_or_default()
}

/// The job's report from the ranks' answers `got`, `asked` being the
/// ranks that were asked, `n` the job's size.
pub(crate) fn merged(got: &BTreeMap<usize, Value>, asked: &[usize], n: usize) -> String {
    let mut out = format!(
        "tandem-run: hang report of the job: {} of {} asked ranks answered ({n} ranks)",
        asked.iter().filter(|r| got.contains_key(r)).count(),
        asked.len(),
    );
    // Each rank's wait: its own word, else what the others saw of it.
    for r in 0..n {
        let line = match got.get(&r) {
            Some(v) => match str_of(v, "wait") {
                Some(w) => format!("rank {r} waits in {w}"),
                None => format!("rank {r} waits for nothing it published (a short wait)"),
            },
            None => {
                let seen = got.values().find_map(|v| {
                    v.get("others")?.as_array()?.iter().find_map(|o| {
                        (o.get(0)?.as_u64()? as usize == r).then(|| o.get(1)?.as_str())?
                    })
                });
                let why = if asked.contains(&r) {
                    format!(
                        "no answer within {} s (computing outside tandem, stopped, or gone)",
                        ANSWER_WITHIN.as_secs()
                    )
                } else {
                    "not asked".into()
                };
                match seen {
                    Some(w) => format!("rank {r}: {why}; the others see it in {w}"),
                    None => format!("rank {r}: {why}"),
                }
            }
        };
        let _ = write!(out, "\n  {line}");
    }
    // Every cycle once (each of its ranks reports it), then the chains.
    let mut cycles: Vec<Vec<usize>> = Vec::new();
    for v in got.values() {
        let Some(rel) = str_of(v, "relation") else {
            continue;
        };
        let cyc = ranks_of(v, "cycle");
        if !cyc.is_empty() {
            let mut key = cyc.clone();
            key.sort_unstable();
            if cycles.contains(&key) {
                continue;
            }
            cycles.push(key);
        }
        let _ = write!(out, "\n  {rel}");
    }
    let mut dead: Vec<usize> = got.values().flat_map(|v| ranks_of(v, "dead")).collect();
    dead.sort_unstable();
    dead.dedup();
    let _ = write!(out, "\n  dead ranks: {}", rank_list(&dead));
    for (r, v) in got {
        if let Some(u) = str_of(v, "unmatched") {
            let _ = write!(out, "\n  unmatched at rank {r}: {u}");
        }
    }
    out.push_str("\n  last events (newest last):");
    for (r, v) in got {
        let _ = write!(out, "\n    rank {r}:");
        for line in v
            .get("last")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(l) = line.as_str() {
                let _ = write!(out, "\n      {l}");
            }
        }
    }
    for (r, v) in got {
        if let Some(t) = str_of(v, "trace").filter(|t| !t.is_empty()) {
            let _ = write!(out, "\n  rank {r} {t}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(rank: usize, wait: &str, cycle: &[usize], rel: &str) -> Value {
        json!({
            "rank": rank, "wait": wait, "others": [[3, "recv from rank 0 tag 1"]],
            "relation": rel, "cycle": cycle, "unmatched": null, "dead": [],
            "last": [format!("event of {rank}")], "trace": format!("trace: /t/rank-{rank}.json"),
        })
    }

    #[test]
    fn a_cycle_is_said_once_and_a_silent_rank_is_named() {
        let c = Collected::default();
        let mut round = Round::default();
        round.ask(vec![0, 1, 2, 3]);
        for (r, a) in [(0, 1), (1, 2), (2, 0)] {
            let v = answer(
                r,
                &format!("recv from rank {a} tag 1"),
                &[r, a, 3 - r - a],
                &format!("cycle: {r}"),
            );
            let line = format!("{MARK}{v}");
            assert!(c.take(r, line.as_bytes()));
        }
        assert!(!c.take(0, b"an ordinary line"));
        // Rank 3 has not answered and is still running: not yet.
        assert_eq!(round.poll(&c, 4, |_| true), None);
        // It ends: the report comes without it.
        let text = round.poll(&c, 4, |_| false).expect("complete");
        assert!(text.contains("3 of 4 asked ranks answered"), "{text}");
        assert!(
            text.contains("rank 0 waits in recv from rank 1 tag 1"),
            "{text}"
        );
        assert!(
            text.contains("rank 3: no answer within 2 s")
                && text.contains("the others see it in recv from rank 0 tag 1"),
            "{text}"
        );
        assert_eq!(text.matches("cycle:").count(), 1, "{text}");
        assert!(text.contains("dead ranks: none"), "{text}");
        assert!(text.contains("    rank 2:\n      event of 2"), "{text}");
        assert!(text.contains("rank 1 trace: /t/rank-1.json"), "{text}");
        // Nothing more to say.
        assert_eq!(round.poll(&c, 4, |_| false), None);
    }

    #[test]
    fn an_answer_nobody_asked_the_launcher_for_is_printed_at_once() {
        let c = Collected::default();
        let mut round = Round::default();
        let v = answer(2, "recv from rank 1 tag 1", &[], "chain: 2");
        assert!(c.take(2, format!("{MARK}{v}").as_bytes()));
        let text = round.poll(&c, 3, |_| true).expect("at once");
        assert!(text.contains("1 of 1 asked ranks answered"), "{text}");
        assert!(text.contains("rank 0: not asked"), "{text}");
        assert!(text.contains("chain: 2"), "{text}");
    }
}
