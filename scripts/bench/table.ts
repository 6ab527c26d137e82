export type Cell = string | number | undefined;

export interface Column {
  readonly title: string;
  /** Digits after the point for numbers; default 0. */
  readonly digits?: number;
  /** Left-align (text columns). */
  readonly left?: boolean;
}

/** Formats a number with thousands separators and fixed digits; `undefined`/NaN render as `-`. */
export function formatNumber(value: number | undefined, digits = 0): string {
  if (value === undefined || Number.isNaN(value)) return '-';
  if (!Number.isFinite(value)) return value > 0 ? 'inf' : '-inf';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** A plain-text table with a header rule, numbers right-aligned. */
export function renderTable(columns: readonly Column[], rows: readonly Cell[][]): string {
  const text = rows.map((row) =>
    columns.map((column, i) => {
      const cell = row[i];
      return typeof cell === 'number' || cell === undefined ? formatNumber(cell, column.digits) : cell;
    }),
  );
  const widths = columns.map((column, i) => Math.max(column.title.length, ...text.map((row) => row[i]!.length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => (columns[i]!.left ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.title)), line(widths.map((w) => '-'.repeat(w))), ...text.map(line)].join('\n');
}
