// Charts of the benchmark report as plain SVG text: grouped bars or lines over a few categories.
// No dependency; the files are small and render on GitHub and in any browser.

export interface Chart {
  /** File name under bench/charts/ (without directory), e.g. `get-throughput.svg`. */
  file: string;
  title: string;
  /** Axis label, e.g. `req/s` or `ms`. */
  unit: string;
  kind: 'bar' | 'line';
  /** The x axis: one group of bars (or one point per line) each. */
  categories: string[];
  /** One colour each; a null value leaves its bar or point out. */
  series: Array<{ name: string; values: Array<number | null> }>;
}

const COLOURS = ['#2563eb', '#ea580c', '#16a34a', '#9333ea', '#dc2626', '#0891b2'];
const W = 720;
const H = 380;
const M = { top: 48, right: 24, bottom: 78, left: 72 };

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A round axis maximum and its tick step for values up to `max`. */
function scale(max: number): { top: number; step: number } {
  if (!(max > 0)) return { top: 1, step: 0.25 };
  const rough = max / 5;
  const mag = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= rough) ?? 10 * mag;
  return { top: Math.ceil(max / step) * step, step };
}

function fmt(v: number): string {
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

export function renderChart(chart: Chart): string {
  const plotW = W - M.left - M.right;
  const plotH = H - M.top - M.bottom;
  const values = chart.series.flatMap((s) => s.values).filter((v): v is number => v !== null && Number.isFinite(v));
  const { top, step } = scale(Math.max(0, ...values));
  const y = (v: number) => M.top + plotH - (v / top) * plotH;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${W / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">${esc(chart.title)}</text>`,
    `<text x="18" y="${M.top + plotH / 2}" text-anchor="middle" transform="rotate(-90 18 ${M.top + plotH / 2})">${esc(chart.unit)}</text>`,
  ];
  for (let t = 0; t <= top + step / 2; t += step) {
    out.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#e5e7eb"/>`);
    const tick = Number.isInteger(step) ? t.toFixed(0) : t.toFixed(step < 0.1 ? 3 : step < 1 ? 2 : 1);
    out.push(`<text x="${M.left - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end" fill="#374151">${tick}</text>`);
  }
  out.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${y(0)}" y2="${y(0)}" stroke="#111827"/>`);
  const band = plotW / Math.max(1, chart.categories.length);
  chart.categories.forEach((c, i) => {
    out.push(`<text x="${(M.left + band * (i + 0.5)).toFixed(1)}" y="${M.top + plotH + 18}" text-anchor="middle" fill="#111827">${esc(c)}</text>`);
  });
  if (chart.kind === 'bar') {
    const n = chart.series.length;
    const barW = (band * 0.8) / n;
    chart.series.forEach((s, si) => {
      s.values.forEach((v, ci) => {
        if (v === null || !Number.isFinite(v)) return;
        const x = M.left + band * ci + band * 0.1 + barW * si;
        out.push(`<rect x="${x.toFixed(1)}" y="${y(v).toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${(y(0) - y(v)).toFixed(1)}" fill="${COLOURS[si % COLOURS.length]}"><title>${esc(`${s.name}, ${chart.categories[ci]}: ${fmt(v)} ${chart.unit}`)}</title></rect>`);
        out.push(`<text x="${(x + (barW - 2) / 2).toFixed(1)}" y="${(y(v) - 4).toFixed(1)}" text-anchor="middle" font-size="10" fill="#111827">${fmt(v)}</text>`);
      });
    });
  } else {
    chart.series.forEach((s, si) => {
      const colour = COLOURS[si % COLOURS.length];
      const points = s.values.map((v, ci) => (v === null || !Number.isFinite(v) ? null : { x: M.left + band * (ci + 0.5), y: y(v), v }));
      const drawn = points.filter((p): p is { x: number; y: number; v: number } => p !== null);
      if (drawn.length > 1) out.push(`<polyline fill="none" stroke="${colour}" stroke-width="2" points="${drawn.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' ')}"/>`);
      for (const p of drawn) {
        out.push(`<circle cx="${p.x.toFixed(1)}" cy="${p.y.toFixed(1)}" r="4" fill="${colour}"/>`);
        out.push(`<text x="${(p.x + 6).toFixed(1)}" y="${(p.y - 6).toFixed(1)}" font-size="10" fill="${colour}">${fmt(p.v)}</text>`);
      }
    });
  }
  // legend, below the axis labels
  let lx = M.left;
  chart.series.forEach((s, si) => {
    out.push(`<rect x="${lx}" y="${H - 28}" width="12" height="12" fill="${COLOURS[si % COLOURS.length]}"/>`);
    out.push(`<text x="${lx + 16}" y="${H - 18}" fill="#111827">${esc(s.name)}</text>`);
    lx += 28 + s.name.length * 6.6;
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}
