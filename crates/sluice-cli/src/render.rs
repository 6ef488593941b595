//! Rendering a profile: Chrome trace-event JSON (Perfetto), an SVG timeline and the
//! per-layer table. The runtime (`sluice::profile`) only measures; pictures are drawn here.

use sluice::profile::{CpuSpan, DispatchTiming, LayerRow, OpStat};

/// Chrome trace-event JSON (opens in Perfetto): one GPU span per dispatch of the given
/// token (thread "GPU", times relative to its first dispatch) and the host spans
/// (thread "CPU").
pub fn chrome_trace(timings: &[DispatchTiming], cpu: &[CpuSpan]) -> serde_json::Value {
    let t0 = timings
        .iter()
        .map(|t| t.begin_ns)
        .fold(f64::INFINITY, f64::min);
    let mut events = vec![
        serde_json::json!({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "sluice"}}),
        serde_json::json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "GPU (one token)"}}),
        serde_json::json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "CPU"}}),
    ];
    for t in timings {
        events.push(serde_json::json!({
            "name": t.label, "cat": t.op(), "ph": "X", "pid": 1, "tid": 1,
            "ts": (t.begin_ns - t0) / 1e3, "dur": t.us(),
            "args": {"kernel": t.kernel, "group": t.group, "node": t.node}
        }));
    }
    for c in cpu {
        events.push(serde_json::json!({
            "name": c.name, "cat": "cpu", "ph": "X", "pid": 1, "tid": 2, "ts": c.begin_ns / 1e3, "dur": c.dur_ns / 1e3
        }));
    }
    serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ns" })
}

const PALETTE: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#17becf", "#8c564b",
];

/// The colour of an op kind: a hash of its name (FNV-1a), so an op keeps its colour
/// across profiles whatever else ran.
pub fn op_colour(op: &str) -> &'static str {
    let h = op.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    PALETTE[(h % PALETTE.len() as u64) as usize]
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `n` ticks over `span`.
pub fn tick_step(span: f64, n: f64) -> f64 {
    if !(span > 0.0 && span.is_finite()) {
        return 1.0;
    }
    let raw = span / n.max(1.0);
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    p * if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG picture: one token's GPU timeline (a lane per op kind, a µs axis, barriers as
/// red lines) above a bar chart of GPU µs per op kind; colours are stable per op kind.
pub fn timeline_svg(title: &str, timings: &[DispatchTiming], ops: &[OpStat]) -> String {
    const W: f64 = 1200.0;
    const LEFT: f64 = 150.0;
    const LANE: f64 = 16.0;
    let t0 = timings
        .iter()
        .map(|t| t.begin_ns)
        .fold(f64::INFINITY, f64::min);
    let t1 = timings.iter().map(|t| t.end_ns).fold(0.0, f64::max);
    let span = if timings.is_empty() {
        1.0
    } else {
        (t1 - t0).max(1.0)
    };
    let t0 = if timings.is_empty() { 0.0 } else { t0 };
    let x = |ns: f64| LEFT + (ns - t0) / span * (W - LEFT - 20.0);
    let lane_of = |op: &str| ops.iter().position(|o| o.op == op).unwrap_or(0);
    let lanes_bottom = 30.0 + LANE * ops.len() as f64;
    let axis_y = lanes_bottom + 4.0;
    let timeline_h = axis_y + 22.0;
    let bars_top = timeline_h + 40.0;
    let height = bars_top + 22.0 * ops.len() as f64 + 30.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"14\">{} — one token, {:.1} µs GPU, {} dispatches</text>\n",
        esc(title),
        span / 1e3,
        timings.len()
    );
    for (i, o) in ops.iter().enumerate() {
        let y = 30.0 + LANE * i as f64;
        s += &format!("<text x=\"10\" y=\"{}\">{}</text>\n", y + 11.0, esc(&o.op));
    }
    // Time axis in µs from the token's first dispatch.
    let span_us = span / 1e3;
    let step = tick_step(span_us, 8.0);
    s += &format!(
        "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{axis_y}\" y2=\"{axis_y}\" stroke=\"#333\" stroke-width=\"0.6\"/>\n",
        W - 20.0
    );
    let mut k = 0u32;
    loop {
        let us = step * k as f64;
        if us > span_us + 1e-9 || k > 1000 {
            break;
        }
        let tx = x(t0 + us * 1e3);
        s += &format!(
            "<line x1=\"{tx:.1}\" x2=\"{tx:.1}\" y1=\"{axis_y}\" y2=\"{}\" stroke=\"#333\" stroke-width=\"0.6\"/><text x=\"{tx:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>\n",
            axis_y + 4.0,
            axis_y + 15.0,
            if step >= 1.0 { format!("{us:.0}") } else { format!("{us:.2}") }
        );
        k += 1;
    }
    s += &format!(
        "<text x=\"10\" y=\"{}\" font-size=\"10\">µs</text>\n",
        axis_y + 15.0
    );
    // Barriers: where a new concurrent group starts.
    let mut seen = std::collections::BTreeMap::new();
    for t in timings {
        let e = seen.entry(t.group).or_insert(t.begin_ns);
        *e = f64::min(*e, t.begin_ns);
    }
    for (g, b) in &seen {
        if *g > 0 {
            let bx = x(*b);
            s += &format!("<line x1=\"{bx:.1}\" x2=\"{bx:.1}\" y1=\"28\" y2=\"{lanes_bottom}\" stroke=\"#d00\" stroke-width=\"0.4\" opacity=\"0.6\"/>\n");
        }
    }
    for t in timings {
        let lane = lane_of(t.op());
        let (x0, x1) = (x(t.begin_ns), x(t.end_ns));
        s += &format!(
            "<rect x=\"{x0:.2}\" y=\"{}\" width=\"{:.2}\" height=\"{}\" fill=\"{}\"><title>{} ({}) {:.2} µs</title></rect>\n",
            30.0 + LANE * lane as f64 + 2.0,
            (x1 - x0).max(0.5),
            LANE - 4.0,
            op_colour(t.op()),
            esc(&t.label),
            esc(&t.kernel),
            t.us()
        );
    }
    s += &format!("<text x=\"10\" y=\"{}\" font-size=\"13\">GPU µs per token by op kind (red lines above: barriers)</text>\n", bars_top - 12.0);
    let max = ops.iter().map(|o| o.gpu_us).fold(0.0, f64::max).max(1e-9);
    for (i, o) in ops.iter().enumerate() {
        let y = bars_top + 22.0 * i as f64;
        let w = o.gpu_us / max * (W - LEFT - 260.0);
        s += &format!(
            "<text x=\"10\" y=\"{}\">{}</text><rect x=\"{LEFT}\" y=\"{y}\" width=\"{w:.1}\" height=\"16\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{}\">{:.1} µs ({:.0}%, {}×){}</text>\n",
            y + 12.0,
            esc(&o.op),
            op_colour(&o.op),
            LEFT + w + 6.0,
            y + 12.0,
            o.gpu_us,
            o.share * 100.0,
            o.count,
            o.gb_s.map(|g| format!(", {g:.0} GB/s")).unwrap_or_default()
        );
    }
    s + "</svg>\n"
}

/// The per-layer table (markdown): a row per layer, a column per op kind (its dispatches'
/// µs in the order they ran, "13.6 + 12.8"), the layer's total, and where an op's kernels
/// differ from its first layer's, which ones ran (a mixture's Q6_K layers stand out).
pub fn layer_table_md(rows: &[LayerRow]) -> String {
    let mut ops: Vec<&str> = Vec::new();
    for r in rows {
        for o in &r.ops {
            if !ops.contains(&o.op.as_str()) {
                ops.push(&o.op);
            }
        }
    }
    // Each op's kernels in the first layer that runs it.
    let first: Vec<&[String]> = ops
        .iter()
        .filter_map(|&op| {
            rows.iter()
                .find_map(|r| r.ops.iter().find(|o| o.op == op))
                .map(|o| &o.kernels[..])
        })
        .collect();
    let mut md = format!(
        "| layer | {} | layer µs | kernels unlike layer {} |\n",
        ops.join(" | "),
        rows.first().map_or(0, |r| r.layer)
    );
    md += &format!("|---|{}---|---|\n", "---|".repeat(ops.len()));
    for r in rows {
        let mut cells = Vec::new();
        let mut unlike = Vec::new();
        for (&op, &first) in ops.iter().zip(&first) {
            match r.ops.iter().find(|o| o.op == op) {
                Some(o) => {
                    let us: Vec<String> = o.us.iter().map(|u| format!("{u:.1}")).collect();
                    cells.push(us.join(" + "));
                    if o.kernels != first {
                        unlike.push(format!("{op}: {}", o.kernels.join(" + ")));
                    }
                }
                None => cells.push("-".into()),
            }
        }
        let total: f64 = r.ops.iter().flat_map(|o| &o.us).sum();
        md += &format!(
            "| {} | {} | {total:.1} | {} |\n",
            r.layer,
            cells.join(" | "),
            unlike.join("; ")
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(label: &str, node: usize, group: usize, b: f64, e: f64) -> DispatchTiming {
        DispatchTiming {
            label: label.into(),
            kernel: "k<1>".into(),
            node,
            group,
            begin_ns: b,
            end_ns: e,
        }
    }

    #[test]
    fn layer_table_shows_each_dispatch_and_the_layers_whose_kernels_differ() {
        let mut t = vec![
            timing("attn.qkv L0", 0, 0, 0.0, 4000.0),
            timing("mlp.down L0", 1, 1, 5000.0, 7000.0),
            timing("attn.qkv L1", 2, 2, 8000.0, 13_000.0),
            timing("attn.qkv L1", 3, 2, 13_000.0, 16_000.0),
            timing("mlp.down L1", 4, 3, 17_000.0, 18_000.0),
            timing("lm_head", 5, 4, 19_000.0, 30_000.0),
        ];
        t[3].kernel = "q6".into();
        let md = layer_table_md(&sluice::profile::layer_table(&t));
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4, "{md}");
        assert_eq!(
            lines[0],
            "| layer | attn.qkv | mlp.down | layer µs | kernels unlike layer 0 |"
        );
        assert_eq!(lines[2], "| 0 | 4.0 | 2.0 | 6.0 |  |");
        assert_eq!(
            lines[3],
            "| 1 | 5.0 + 3.0 | 1.0 | 9.0 | attn.qkv: k<1> + q6 |"
        );
    }

    #[test]
    fn trace_and_svg_cover_every_dispatch_with_an_axis_and_stable_colours() {
        let t = vec![
            timing("embed", 0, 0, 1000.0, 3000.0),
            timing("matvec L0", 1, 1, 3500.0, 9000.0),
            timing("matvec L1", 2, 1, 3600.0, 9500.0),
            timing("argmax", 3, 2, 10_000.0, 11_000.0),
        ];
        let ops = sluice::profile::op_table(&t, |_| None);
        let trace = chrome_trace(&t, &[]);
        let gpu: Vec<&serde_json::Value> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == 1)
            .collect();
        assert_eq!(gpu.len(), 4);
        assert_eq!(gpu[0]["ts"], 0.0, "relative to the first dispatch");
        assert_eq!(gpu[3]["ts"], 9.0);
        let svg = timeline_svg("a <test>", &t, &ops);
        assert!(svg.contains("a &lt;test&gt;") && svg.contains("k&lt;1&gt;"));
        // 4 dispatch rects + 3 bars + the background.
        assert_eq!(svg.matches("<rect").count(), 4 + 3 + 1);
        // Axis over 10 µs: ticks 0, 2, 4, 6, 8, 10.
        assert_eq!(tick_step(10.0, 8.0), 2.0);
        for label in [">0<", ">2<", ">4<", ">10<"] {
            assert!(svg.contains(label), "tick {label}");
        }
        // Two barriers (groups 1 and 2).
        assert_eq!(svg.matches("stroke=\"#d00\"").count(), 2);
        // Colours depend on the op name only.
        let alone = timeline_svg("x", &t[3..], &sluice::profile::op_table(&t[3..], |_| None));
        assert!(alone.contains(op_colour("argmax")) && svg.contains(op_colour("argmax")));
        assert_eq!(op_colour("matvec"), op_colour("matvec"));
        assert_ne!(op_colour("matvec"), op_colour("argmax"));
    }

    #[test]
    fn tick_steps_are_one_two_five() {
        assert_eq!(tick_step(1000.0, 8.0), 200.0);
        assert_eq!(tick_step(7.0, 8.0), 1.0);
        assert!((tick_step(0.3, 8.0) - 0.05).abs() < 1e-12);
        assert_eq!(tick_step(0.0, 8.0), 1.0);
    }
}
