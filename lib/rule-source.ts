import { ThrottleConfigError } from './errors.js';
import { isConcurrent, parseRules, type Rule, type RuleInput } from './rules.js';

/** Rules for a key: fixed, or chosen per key (plan tiers). A function may be async. */
export type RulesOption =
  RuleInput | readonly RuleInput[] | ((key: string) => RuleInput | readonly RuleInput[] | PromiseLike<RuleInput | readonly RuleInput[]>);

/** A key's rules, as the throttle reads them for each call. */
export type RuleSource = (key: string) => Promise<readonly Rule[]> | readonly Rule[];

/**
 * Turns the `rules` option into a source of parsed rules: fixed rules are parsed once; a function's
 * answers are parsed once per answer object (a plan table that returns the same arrays costs nothing).
 * Rules with a limit above `bucketAbove` are counted in `buckets` buckets per window (docs/design.md).
 */
export function compileRules(option: RulesOption, bucketAbove: number, buckets: number): RuleSource {
  const finish = (input: unknown): readonly Rule[] => bucketRules(parseRules(input as RuleInput | readonly RuleInput[]), bucketAbove, buckets);
  if (typeof option !== 'function') {
    if (option === undefined) throw new ThrottleConfigError("Expected rules, e.g. ['30/min'], got undefined", 'rules');
    const rules = finish(option);
    return () => rules;
  }
  const cache = new WeakMap<object, readonly Rule[]>();
  return async (key) => {
    const input = await option(key);
    if (input === null || typeof input !== 'object') return finish(input);
    let rules = cache.get(input);
    if (!rules) cache.set(input, (rules = finish(input)));
    return rules;
  };
}

/**
 * Rules with a limit above `above` are counted in `buckets` buckets per window (see
 * `ThrottleOptions.bucketAbove`). A cap on calls in flight keeps no history: never bucketed.
 */
function bucketRules(rules: readonly Rule[], above: number, buckets: number): readonly Rule[] {
  const bucketed = (rule: Rule): boolean => rule.limit > above && !isConcurrent(rule);
  if (!rules.some(bucketed)) return rules;
  return rules.map((rule) => (bucketed(rule) ? { limit: rule.limit, windowMs: rule.windowMs, bucketMs: Math.ceil(rule.windowMs / buckets) } : rule));
}
