//! Plain-text tables, for every bench: numbers to three significant digits or so, cells as
//! `median (min–max)`, ratios, and columns aligned.
use super::stats::Spread;

/// Three significant digits or so: more would be noise at a few rounds of a few seconds.
fn decimals(v: f64) -> usize {
    match v.abs() {
        x if x >= 100.0 => 0,
        x if x >= 10.0 => 1,
        _ => 2,
    }
}

pub(crate) fn number(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.*}", decimals(v))
    } else {
        "n/a".to_owned()
    }
}

/// `median (min–max)`, or the lone value of a single round; the range takes the median's
/// precision so the three numbers line up by eye.
pub(crate) fn cell(spread: Option<Spread>) -> String {
    let Some(s) = spread else {
        return "n/a".to_owned();
    };
    if !s.median.is_finite() {
        return "n/a".to_owned();
    }
    let d = decimals(s.median);
    if s.is_single() {
        format!("{:.*}", d, s.median)
    } else {
        format!("{:.*} ({:.*}–{:.*})", d, s.median, d, s.min, d, s.max)
    }
}

pub(crate) fn ratio(r: Option<f64>) -> String {
    r.filter(|r| r.is_finite())
        .map_or_else(|| "n/a".to_owned(), |r| format!("{r:.2}x"))
}

/// Rows as columns: the first left-aligned, the rest right-aligned under their headers; an empty
/// row is a blank line.
pub(crate) fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                // Numbers align right, under their header.
                line.push_str("   ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_show_median_and_range() {
        assert_eq!(cell(Spread::of(&[21.34, 20.1, 22.04])), "21.3 (20.1–22.0)");
        assert_eq!(cell(Spread::of(&[812.4])), "812");
        assert_eq!(cell(Spread::of(&[1.234, 1.1])), "1.17 (1.10–1.23)");
        assert_eq!(cell(None), "n/a");
        assert_eq!(ratio(Some(1.4249)), "1.42x");
        assert_eq!(ratio(Some(f64::INFINITY)), "n/a");
    }
}
