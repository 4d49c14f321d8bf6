//! The Prometheus / OpenMetrics text exposition, as far as the guard reads it: one sample line
//! at a time (its name, labels and value).

/// One sample line: its metric name, labels and value.
#[derive(Debug, PartialEq)]
pub(super) struct Sample<'a> {
    pub(super) name: &'a str,
    pub(super) labels: Vec<(&'a str, String)>,
    pub(super) value: f64,
}

impl Sample<'_> {
    pub(super) fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.as_str())
    }

    /// Not labelled `synthetic="true"` (a series without the label is real traffic).
    pub(super) fn real(&self) -> bool {
        self.label("synthetic") != Some("true")
    }
}

/// Parses one line of the Prometheus / OpenMetrics text format (`None`: a comment, a blank
/// or malformed line). A timestamp or exemplar after the value is ignored.
pub(super) fn parse_line(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(mut r) = rest.strip_prefix('{') {
        loop {
            r = r.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
            if let Some(after) = r.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = r.find('=')?;
            let key = r[..eq].trim();
            r = r[eq + 1..].trim_start().strip_prefix('"')?;
            let mut value = String::new();
            let mut chars = r.char_indices();
            let end = loop {
                let (i, c) = chars.next()?;
                match c {
                    '"' => break i,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    c => value.push(c),
                }
            };
            labels.push((key, value));
            r = &r[end + 1..];
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = parse_number(value)?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// A sample value or an `le` bound (`+Inf`, `1e-3`); `None` for NaN or garbage.
pub(super) fn parse_number(s: &str) -> Option<f64> {
    let v = match s {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse::<f64>().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_parser_reads_labels_escapes_and_special_values() {
        let s = parse_line(r#"x_bucket{a="1",b="q\"uo\\te",le="+Inf"} 12 1700000000"#).unwrap();
        assert_eq!(s.name, "x_bucket");
        assert_eq!(s.label("b"), Some(r#"q"uo\te"#));
        assert_eq!(s.label("le").and_then(parse_number), Some(f64::INFINITY));
        assert_eq!(s.value, 12.0);
        assert_eq!(parse_line("up 1").unwrap().value, 1.0);
        assert_eq!(
            parse_line("x{} 2.5e1 # {trace_id=\"a\"} 1").unwrap().value,
            25.0
        );
        for bad in [
            "",
            "# TYPE x counter",
            "x{a=\"1\" 3",
            "x{a=1} 3",
            "x NaN",
            "{a=\"b\"} 1",
            "x",
        ] {
            assert_eq!(parse_line(bad), None, "{bad}");
        }
    }
}
