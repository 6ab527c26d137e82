/**
 * `30/60000ms` → `30/min` style label for messages, errors, metrics and the CLI; `4 concurrent` for
 * a cap in flight (window 0). One label everywhere. On its own so that errors.ts, which rules.ts
 * imports, can use it too.
 */
export function formatRule(rule: { readonly limit: number; readonly windowMs: number }): string {
  if (rule.windowMs === 0) return `${rule.limit} concurrent`;
  for (const [unit, ms] of [
    ['day', 86_400_000],
    ['h', 3_600_000],
    ['min', 60_000],
    ['s', 1_000],
  ] as const) {
    if (rule.windowMs === ms) return `${rule.limit}/${unit}`;
    if (rule.windowMs % ms === 0) return `${rule.limit}/${rule.windowMs / ms}${unit}`;
  }
  return `${rule.limit}/${rule.windowMs}ms`;
}
