// Figures the services page derives from a service's /metrics (the studio returns Prometheus
// text as JSON: plain samples by name, histogram buckets as {le: cumulative count}).

// The q-quantile (0..1) of a cumulative histogram, interpolated linearly inside its bucket as
// Prometheus' histogram_quantile does; null when it holds no samples.
export function histogramQuantile(buckets, q) {
  if (!buckets) return null;
  const bounds = Object.keys(buckets)
    .filter((b) => b !== '+Inf')
    .map(Number)
    .sort((a, b) => a - b);
  const total = buckets['+Inf'] ?? (bounds.length ? buckets[String(bounds.at(-1))] : 0);
  if (!total) return null;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const b of bounds) {
    const count = buckets[String(b)] ?? buckets[b.toString()];
    if (count >= rank) {
      const inBucket = count - prevCount;
      return inBucket > 0 ? prevBound + ((b - prevBound) * (rank - prevCount)) / inBucket : b;
    }
    prevBound = b;
    prevCount = count;
  }
  return prevBound; // in the +Inf bucket: the largest finite bound, as Prometheus answers
}

// Per-bucket (not cumulative) counts for a bar chart: [{le, count}].
export function histogramBars(buckets) {
  if (!buckets) return [];
  const keys = Object.keys(buckets).sort((a, b) => (a === '+Inf' ? 1 : b === '+Inf' ? -1 : a - b));
  let prev = 0;
  return keys.map((le) => {
    const count = buckets[le] - prev;
    prev = buckets[le];
    return { le, count };
  });
}

// Human units: 1.5e11 FLOP/s -> "150 GFLOP/s", 0.0021 s -> "2.1 ms".
export function formatValue(v, unit = '') {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (unit === 's') {
    if (v < 1e-6) return `${(v * 1e9).toPrecision(3)} ns`;
    if (v < 1e-3) return `${(v * 1e6).toPrecision(3)} µs`;
    if (v < 1) return `${(v * 1e3).toPrecision(3)} ms`;
    return `${v.toPrecision(3)} s`;
  }
  const prefixes = ['', 'K', 'M', 'G', 'T', 'P'];
  let i = 0;
  let x = Math.abs(v);
  while (x >= 1000 && i < prefixes.length - 1) {
    x /= 1000;
    ++i;
  }
  return `${(Math.sign(v) * x).toPrecision(3)} ${prefixes[i]}${unit}`.trim();
}

// hits / queries as a percentage ("42%"), '–' before any query (a prefix cache's hit rate).
export function hitRate(hits, queries) {
  if (!queries) return '–';
  return `${Math.round((100 * (hits ?? 0)) / queries)}%`;
}
