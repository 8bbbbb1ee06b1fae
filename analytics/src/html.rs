//! The report as one self-contained HTML page: its numbers, and three charts
//! drawn as inline SVG (tokens per task, calls over time, tree depths), so the
//! page needs no script, font or file beside it.

use std::fmt::Write as _;

use crate::report::{
    Calls, DocumentCost, ErrorCount, MemoryCalls, Report, TableRows, TaskCalls, TreeShape, decimal,
};

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}\
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}\
td:first-child,th:first-child{text-align:left}.figures td{text-align:left}\
svg text{font:12px system-ui,sans-serif;fill:#222}.in{fill:#4c78a8}.out{fill:#f58518}.bar{fill:#54a24b}";

/// Width of a chart's plotting area, and of the label column beside bars.
const WIDTH: f64 = 640.0;
const LABEL: f64 = 170.0;

pub fn html(report: &Report) -> String {
    let mut page = String::new();
    let title = format!(
        "memweave report: {} (checkpoint {})",
        report.tables, report.epoch
    );
    let _ = write!(
        page,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1>",
        escape(&title),
        escape(&title)
    );
    let (o, d, g) = (&report.overview, &report.density, &report.gists);
    let cost = &report.cost;
    let figures = [
        ("Documents", o.documents.to_string()),
        ("Tokens indexed", o.tokens.to_string()),
        (
            "Model tokens per corpus token",
            decimal(cost.tokens_per_corpus_token),
        ),
        (
            "Model calls per 1,000 corpus tokens",
            decimal(cost.calls_per_1k_tokens),
        ),
        (
            "Entities per 1,000 tokens",
            decimal(d.entities_per_1k_tokens),
        ),
        (
            "Relations per 1,000 tokens",
            decimal(d.relations_per_1k_tokens),
        ),
        (
            "Gist compression rate (ReadAgent's CR)",
            format!("{}%", decimal(g.compression_rate)),
        ),
    ];
    page.push_str("<table class=\"figures\">");
    for (name, value) in figures {
        let _ = write!(
            page,
            "<tr><td>{name}</td><td><b>{}</b></td></tr>",
            escape(&value)
        );
    }
    page.push_str("</table>");

    page.push_str(
        "<h2>Tokens per task (<span style=\"color:#4c78a8\">in</span>, <span style=\"color:#f58518\">out</span>)</h2>",
    );
    let tasks: Vec<(String, f64, f64)> = report
        .calls_by_task
        .iter()
        .map(|r| {
            let c = &r.calls;
            (r.task.clone(), c.tokens_in as f64, c.tokens_out as f64)
        })
        .collect();
    page.push_str(&stacked_bars("tokens-per-task", &tasks));

    page.push_str("<h2>Model calls over time (per minute)</h2>");
    let minutes: Vec<(String, f64)> = report
        .calls_over_time
        .iter()
        .map(|r| (r.minute.clone(), r.calls as f64))
        .collect();
    page.push_str(&columns("calls-over-time", &minutes));

    page.push_str("<h2>Tree depths (trees per depth)</h2>");
    let depths: Vec<(String, f64, f64)> = report
        .tree_depths
        .iter()
        .map(|r| (format!("{} depth {}", r.tree, r.depth), r.trees as f64, 0.0))
        .collect();
    page.push_str(&stacked_bars("tree-depths", &depths));

    let tables = [
        ("Calls by memory", table(&report.calls_by_memory)),
        ("Calls by task", table(&report.calls_by_task)),
        (
            "Most expensive documents",
            table(&report.expensive_documents),
        ),
        ("Trees", table(&report.trees)),
        ("Errors", table(&report.errors)),
        ("Rows per table", table(&report.rows)),
    ];
    for (heading, table) in tables {
        let _ = write!(page, "<h2>{heading}</h2>");
        page.push_str(&table);
    }
    page.push_str("</body></html>\n");
    page
}

/// A cell of a report table.
enum Cell<'a> {
    /// Text, or "-" where there is none.
    Text(Option<&'a str>),
    Count(u64),
    /// Two decimals, or "-" where there is none.
    Ratio(Option<f64>),
}

/// A row of a report section as the page's tables show it.
trait Row {
    /// Column names (shown with spaces for underscores).
    fn headers() -> Vec<&'static str>;
    fn cells(&self) -> Vec<Cell<'_>>;
}

/// The columns of a row of calls, after the name of what they were for.
fn call_cells<'a>(name: &'a str, c: &Calls) -> Vec<Cell<'a>> {
    vec![
        Cell::Text(Some(name)),
        Cell::Count(c.calls),
        Cell::Count(c.cache_hits),
        Cell::Count(c.tokens_in),
        Cell::Count(c.tokens_out),
        Cell::Ratio(c.tokens_per_corpus_token),
    ]
}

/// The columns of [`call_cells`] after the name.
const CALL_COLUMNS: [&str; 5] = [
    "calls",
    "cache_hits",
    "tokens_in",
    "tokens_out",
    "tokens_per_corpus_token",
];

impl Row for MemoryCalls {
    fn headers() -> Vec<&'static str> {
        [["memory"].as_slice(), &CALL_COLUMNS].concat()
    }
    fn cells(&self) -> Vec<Cell<'_>> {
        call_cells(&self.memory, &self.calls)
    }
}

impl Row for TaskCalls {
    fn headers() -> Vec<&'static str> {
        [["task"].as_slice(), &CALL_COLUMNS].concat()
    }
    fn cells(&self) -> Vec<Cell<'_>> {
        call_cells(&self.task, &self.calls)
    }
}

impl Row for DocumentCost {
    fn headers() -> Vec<&'static str> {
        vec!["title", "calls", "tokens"]
    }
    fn cells(&self) -> Vec<Cell<'_>> {
        vec![
            Cell::Text(self.title.as_deref()),
            Cell::Count(self.calls),
            Cell::Count(self.tokens),
        ]
    }
}

impl Row for TreeShape {
    fn headers() -> Vec<&'static str> {
        vec![
            "tree",
            "nodes",
            "roots",
            "max_depth",
            "mean_fanout",
            "max_fanout",
        ]
    }
    fn cells(&self) -> Vec<Cell<'_>> {
        vec![
            Cell::Text(Some(&self.tree)),
            Cell::Count(self.nodes),
            Cell::Count(self.roots),
            Cell::Count(self.max_depth),
            Cell::Ratio(self.mean_fanout),
            Cell::Count(self.max_fanout),
        ]
    }
}

impl Row for ErrorCount {
    fn headers() -> Vec<&'static str> {
        vec!["stage", "kind", "errors"]
    }
    fn cells(&self) -> Vec<Cell<'_>> {
        vec![
            Cell::Text(Some(&self.stage)),
            Cell::Text(Some(&self.kind)),
            Cell::Count(self.errors),
        ]
    }
}

impl Row for TableRows {
    fn headers() -> Vec<&'static str> {
        vec!["table", "rows"]
    }
    fn cells(&self) -> Vec<Cell<'_>> {
        vec![Cell::Text(Some(&self.table)), Cell::Count(self.rows)]
    }
}

/// Horizontal bars, one per row: a label, then `first` and `second` stacked
/// (classes `in` and `out`), scaled to the largest total.
fn stacked_bars(id: &str, rows: &[(String, f64, f64)]) -> String {
    let height = 22.0;
    let max = rows
        .iter()
        .map(|(_, a, b)| a + b)
        .fold(0.0, f64::max)
        .max(1.0);
    let total_height = height * rows.len().max(1) as f64;
    let mut svg = format!(
        "<svg id=\"{id}\" width=\"{}\" height=\"{total_height}\" role=\"img\">",
        LABEL + WIDTH + 90.0
    );
    for (i, (label, first, second)) in rows.iter().enumerate() {
        let y = i as f64 * height;
        let (w1, w2) = (first / max * WIDTH, second / max * WIDTH);
        let _ = write!(
            svg,
            "<text x=\"0\" y=\"{}\">{}</text><rect class=\"in\" x=\"{LABEL}\" y=\"{}\" width=\"{w1:.1}\" height=\"{}\" data-value=\"{first}\"/>",
            y + 15.0,
            escape(label),
            y + 3.0,
            height - 6.0
        );
        if *second > 0.0 {
            let _ = write!(
                svg,
                "<rect class=\"out\" x=\"{:.1}\" y=\"{}\" width=\"{w2:.1}\" height=\"{}\" data-value=\"{second}\"/>",
                LABEL + w1,
                y + 3.0,
                height - 6.0
            );
        }
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\">{}</text>",
            LABEL + w1 + w2 + 6.0,
            y + 15.0,
            first + second
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Vertical bars over time, scaled to the largest; the first and last labels
/// under the axis.
fn columns(id: &str, rows: &[(String, f64)]) -> String {
    let (plot, base) = (160.0, 180.0);
    let max = rows.iter().map(|(_, v)| *v).fold(0.0, f64::max).max(1.0);
    // A short build fits in a minute or two: bars stay bars, not blocks.
    let step = (WIDTH / rows.len().max(1) as f64).min(40.0);
    let mut svg = format!(
        "<svg id=\"{id}\" width=\"{}\" height=\"{}\" role=\"img\">",
        WIDTH + 40.0,
        base + 40.0
    );
    let _ = write!(svg, "<text x=\"0\" y=\"12\">{max}</text>");
    for (i, (_, value)) in rows.iter().enumerate() {
        let h = value / max * plot;
        let _ = write!(
            svg,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" data-value=\"{value}\"/>",
            40.0 + i as f64 * step,
            base - h,
            (step - 2.0).max(1.0)
        );
    }
    if let Some(first) = rows.first() {
        let _ = write!(
            svg,
            "<text x=\"40\" y=\"{}\">{}</text>",
            base + 16.0,
            escape(&first.0)
        );
    }
    if let Some(last) = rows.last().filter(|_| rows.len() > 1) {
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            40.0 + rows.len() as f64 * step,
            base + 32.0,
            escape(&last.0)
        );
    }
    svg.push_str("</svg>");
    svg
}

fn table<R: Row>(rows: &[R]) -> String {
    let mut html = String::from("<table><tr>");
    for column in R::headers() {
        let _ = write!(html, "<th>{}</th>", column.replace('_', " "));
    }
    html.push_str("</tr>");
    for row in rows {
        html.push_str("<tr>");
        for cell in row.cells() {
            let value = match cell {
                Cell::Text(text) => text.unwrap_or("-").to_string(),
                Cell::Count(n) => n.to_string(),
                Cell::Ratio(ratio) => decimal(ratio),
            };
            let _ = write!(html, "<td>{}</td>", escape(&value));
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
    html
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
