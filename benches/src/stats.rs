//! Percentiles and human-friendly sizes.

/// The `p`-th percentile (0..=100) of `v` (sorted in place), nearest rank.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Parses `123`, `4K`, `64M`, `1G` (binary units, case-insensitive).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1usize << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// `1024` -> `1K`, `3145728` -> `3M`; exact binary units only.
pub fn fmt_size(n: usize) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// Powers of two from `min` to `max` (both included when they are
/// powers of two; `min` 0 starts at 0 then 1).
pub fn sweep(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    if min == 0 {
        v.push(0);
    }
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        match s.checked_mul(2) {
            Some(next) => s = next,
            None => break,
        }
    }
    if v.last() != Some(&max) && max >= min {
        v.push(max);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("17"), Some(17));
        assert_eq!(parse_size("x"), None);
        assert_eq!(fmt_size(1 << 20), "1M");
        assert_eq!(fmt_size(1000), "1000");
        assert_eq!(sweep(1, 8), vec![1, 2, 4, 8]);
        assert_eq!(sweep(3, 20), vec![3, 6, 12, 20]);
        let mut v = vec![3.0, 1.0, 2.0];
        assert_eq!(percentile(&mut v, 50.0), 2.0);
    }
}
