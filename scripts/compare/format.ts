/** Number formatting shared by the Markdown report and the chart. */

/** Thousands separators and fixed digits; NaN/undefined as `–`. */
export function num(value: number | undefined, digits = 0): string {
  if (value === undefined || Number.isNaN(value)) return '–';
  if (!Number.isFinite(value)) return value > 0 ? '∞' : '−∞';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Two significant digits at least, at most `max` decimals: 0.0042 → 0.0042, 3.14159 → 3.1, 1234 → 1,234. */
export function short(value: number | undefined, max = 3): string {
  if (value === undefined || Number.isNaN(value)) return '–';
  const magnitude = value === 0 ? 0 : Math.floor(Math.log10(Math.abs(value)));
  return num(value, Math.min(max, Math.max(0, 1 - magnitude)));
}

export function percent(ratio: number | undefined, digits = 0): string {
  return ratio === undefined || Number.isNaN(ratio) ? '–' : `${num(ratio * 100, digits)} %`;
}
