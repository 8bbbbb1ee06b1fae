//! What a build cost the model, as `memweave report --json` tells it: calls
//! and model tokens in total, per memory and per task.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::json_output;

/// One task's (or memory's) calls and model tokens.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spend {
    pub calls: f64,
    pub tokens_in: f64,
    pub tokens_out: f64,
}

impl Spend {
    pub fn of(row: &Value) -> Spend {
        let number = |key: &str| row[key].as_f64().unwrap_or(0.0);
        Spend {
            calls: number("calls"),
            tokens_in: number("tokens_in"),
            tokens_out: number("tokens_out"),
        }
    }

    pub fn total(&self) -> f64 {
        self.tokens_in + self.tokens_out
    }
}

/// What a build's report says it cost.
#[derive(Debug, Default)]
pub struct Cost {
    pub corpus_tokens: f64,
    pub memories: BTreeMap<String, Spend>,
    pub tasks: BTreeMap<String, Spend>,
}

impl Cost {
    pub fn of(report: &Value) -> Cost {
        let rows = |section: &str, key: &str| -> BTreeMap<String, Spend> {
            report[section]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| (row[key].as_str().unwrap().to_string(), Spend::of(row)))
                .collect()
        };
        Cost {
            corpus_tokens: report["overview"]["tokens"].as_f64().unwrap(),
            memories: rows("calls_by_memory", "memory"),
            tasks: rows("calls_by_task", "task"),
        }
    }

    pub fn all(&self) -> Spend {
        self.tasks.values().fold(Spend::default(), |sum, t| Spend {
            calls: sum.calls + t.calls,
            tokens_in: sum.tokens_in + t.tokens_in,
            tokens_out: sum.tokens_out + t.tokens_out,
        })
    }

    pub fn calls_per_token(&self) -> f64 {
        self.all().calls / self.corpus_tokens
    }

    pub fn tokens_per_token(&self) -> f64 {
        self.all().total() / self.corpus_tokens
    }

    pub fn print(&self, name: &str) {
        let all = self.all();
        println!();
        println!(
            "{name}: {:.0} corpus tokens, {:.0} calls, {:.2}M model tokens: {:.2} per corpus token",
            self.corpus_tokens,
            all.calls,
            all.total() / 1e6,
            self.tokens_per_token()
        );
        println!(
            "  {:<22} {:>12} {:>10} {:>10} {:>10}",
            "per corpus token", "calls/1k", "in", "out", "in+out"
        );
        let line = |label: &str, spend: &Spend| {
            println!(
                "  {label:<22} {:>12.2} {:>10.3} {:>10.3} {:>10.3}",
                spend.calls * 1000.0 / self.corpus_tokens,
                spend.tokens_in / self.corpus_tokens,
                spend.tokens_out / self.corpus_tokens,
                spend.total() / self.corpus_tokens
            );
        };
        line("all", &all);
        for (memory, spend) in &self.memories {
            line(&format!("memory {memory}"), spend);
        }
        for (task, spend) in &self.tasks {
            line(task, spend);
        }
    }
}

/// `memweave report --tables TABLES --json`.
pub fn report(binary: &Path, tables: &Path) -> Value {
    json_output(
        Command::new(binary)
            .arg("report")
            .arg("--tables")
            .arg(tables)
            .arg("--json"),
    )
}
