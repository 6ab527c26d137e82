import type { Rule } from './rules.js';
import type { ProblemReporter, PublishedLimits, PublishedPolicy } from './vendor-signals.js';

/**
 * Limits a key learns from what its vendor says (`Throttle.learn`), kept by the store beside the
 * key for every process (lua/includes/learned.lua, `MemoryStore`). A learned limit only lowers: a
 * decision counts the key under the tighter of each configured rule and what was learned for its
 * window, and under a learned limit of another window as one more rule. Learned limits lapse unless
 * the vendor says them again.
 */

/** Where a learned limit came from: `RateLimit-Policy`, `X-RateLimit-Limit` (`RateLimit-Limit`), or the vendor's refusals. */
export type LearnSource = 'policy' | 'limit' | 'refusals';

/** The letter each source is stored as; in capitals, a published limit that applies above the rule of its window (`learnAboveRules`). */
const LETTERS: Readonly<Record<LearnSource, string>> = { policy: 'p', limit: 'x', refusals: 'r' };

export function sourceLetter(source: LearnSource, aboveRules = false): string {
  return aboveRules ? LETTERS[source].toUpperCase() : LETTERS[source];
}

export function sourceOfLetter(letter: unknown): LearnSource {
  const lower = typeof letter === 'string' ? letter.toLowerCase() : letter;
  return lower === 'p' ? 'policy' : lower === 'r' ? 'refusals' : 'limit';
}

/** A limit a key learned, as the store holds it. */
export interface LearnedLimit {
  readonly limit: number;
  readonly windowMs: number;
  readonly source: LearnSource;
  /** ms until it lapses, unless learned again. */
  readonly lapsesInMs: number;
}

/**
 * One entry a throttle asks its store to learn for a key, for `windowMs`, lapsing `lapseMs` from now:
 *
 * - `'set'` (the default: a limit the vendor published): replaces what the key learned for the
 *   window; `limit` 0 forgets what `source` taught there (the vendor allows the configured rule again);
 * - `'down'` (the vendor refused a call; `limit`: the rule's configured limit): the calls of the key
 *   that started within the window were more than the vendor took; the N-th refusal of a window of
 *   refusals (one that began less than `windowMs` ago) says it took at most that many less N. The
 *   key learns the lower of that and its limit in force, one less than its limit in force on a
 *   window's first refusal, never below 1;
 * - `'up'` (the vendor took calls and refused none; `limit`: the configured limit): a limit learned
 *   from refusals rises by a tenth (at least 1) two windows after the refusals lowered it, or one
 *   after it last rose, and a new window begins; at the configured limit it is forgotten;
 * - `'hold'` (the vendor says `remaining` calls remain until its reset, `lapseMs` from now; `limit`:
 *   the rule's configured limit): where the log leaves room for more (the limit in force less the
 *   slots that count in the window), the difference is held, as slots of calls the store did not
 *   make, counting until the reset (within the window).
 */
export interface LearnEntry {
  readonly limit: number;
  readonly windowMs: number;
  readonly source: LearnSource;
  readonly lapseMs: number;
  readonly mode?: 'set' | 'down' | 'up' | 'hold';
  /** `'hold'`: what the vendor says remains. */
  readonly remaining?: number;
  /** `'down'`: the fewest calls per window it learns. @default 1 */
  readonly floor?: number;
  /** `'set'`: the configured limit of the window (0 or none: a window no rule has), to tell whether the limit in force goes down. */
  readonly configured?: number;
  /** `'set'`: the limit applies even above the configured rule of its window (`learnAboveRules`). */
  readonly aboveRules?: boolean;
}

/**
 * The rules a decision counts a key under: each of `rules` with the tighter of its limit and what was
 * learned for its window (what was learned, for a limit learned `aboveRules`); then each learned limit
 * of another window, within `retainMs` (the history the key keeps), as a rule of its own.
 * `configured`: how many of them are `rules`'.
 */
export function applyLearned(
  rules: readonly Rule[],
  learned: ReadonlyArray<{ readonly limit: number; readonly windowMs: number; readonly aboveRules?: boolean }>,
  retainMs: number,
): { readonly rules: readonly Rule[]; readonly configured: number } {
  if (learned.length === 0) return { rules, configured: rules.length };
  const effective = rules.map((rule) => {
    let limit = rule.limit;
    for (const entry of learned) {
      if (entry.windowMs === rule.windowMs && (entry.aboveRules === true || entry.limit < limit)) limit = entry.limit;
    }
    return limit === rule.limit ? rule : { ...rule, limit };
  });
  for (const entry of learned) {
    if (entry.windowMs <= retainMs && !rules.some((rule) => rule.windowMs === entry.windowMs)) effective.push({ limit: entry.limit, windowMs: entry.windowMs });
  }
  return { rules: effective, configured: rules.length };
}

/**
 * What one response teaches about a key whose rules are `rules` (history kept: `retainMs`):
 *
 * - each `RateLimit-Policy` policy of a configured rule's window lowers that rule to its quota, or,
 *   at or above the rule's limit, forgets what the policy taught there before (the configured rule
 *   is the ceiling; with `aboveRules`, the quota applies there too, and only one equal to the rule's
 *   limit forgets; `X-RateLimit-Limit`, which names no window, never goes above the rule); a policy of another window within the history kept becomes a rule of its own,
 *   unless the configured rules already keep to it;
 * - `X-RateLimit-Limit` names no window (unless written `100;w=60`, read as a policy): it applies to
 *   a key with one rule of a window; with several, which it limits cannot be told, and it is
 *   `report`ed and left out (the reset counts down within the vendor's window, which need not be one
 *   of the rules').
 *
 * - what remains (`RateLimit`'s `r` and `t` of a policy, `X-RateLimit-Remaining` and `-Reset` for a
 *   key of one rule) is a hold on the window's rule, when it is at most half its limit: the store
 *   holds the room its log leaves beyond it, until the reset (calls the vendor counted and this store
 *   did not make). Above half, the vendor's count and the log's are left to agree.
 *
 * What cannot apply is `report`ed. `lapseMs`: how long what is learned holds without being said again;
 * `aboveRules`: a published limit applies above the configured rule of its window.
 */
export function lessonsOf(
  published: PublishedLimits,
  rules: readonly Rule[],
  retainMs: number,
  { lapseMs, aboveRules = false }: { readonly lapseMs: number; readonly aboveRules?: boolean },
  report?: ProblemReporter,
): LearnEntry[] {
  const windowed = rules.filter((rule) => rule.windowMs > 0);
  const entries: LearnEntry[] = [];
  /**
   * `ceiling`: the configured limit of the window (none: a window no rule has; then it is no rule's,
   * and `configured` 0). `above`: the limit names its window, and may go above the rule (`aboveRules`).
   */
  const teach = (source: LearnSource, windowMs: number, limit: number, ceiling: number | undefined, configured: number, above: boolean): void => {
    if (ceiling !== undefined && above && aboveRules) entries.push({ source, windowMs, limit: limit === ceiling ? 0 : limit, lapseMs, configured, aboveRules });
    else entries.push({ source, windowMs, limit: ceiling === undefined || limit < ceiling ? limit : 0, lapseMs, configured });
  };
  // Several policies of one window: the tightest.
  const tightest = new Map<number, PublishedPolicy>();
  for (const policy of published.policies) {
    const known = tightest.get(policy.windowMs);
    if (known === undefined || policy.quota < known.quota) tightest.set(policy.windowMs, policy);
  }
  for (const policy of tightest.values()) {
    const rule = windowed.find((candidate) => candidate.windowMs === policy.windowMs);
    if (rule !== undefined) {
      teach('policy', rule.windowMs, policy.quota, rule.limit, rule.limit, true);
    } else if (policy.windowMs > retainMs) {
      report?.(
        `ignored RateLimit-Policy "${policy.name}" (${policy.quota} per ${policy.windowMs} ms): its window is longer than the history this throttle keeps (retainMs ${retainMs}); set retainMs to ${policy.windowMs} to learn it`,
      );
    } else if (
      windowed.some((candidate) => candidate.windowMs <= policy.windowMs && candidate.limit * Math.ceil(policy.windowMs / candidate.windowMs) <= policy.quota)
    ) {
      // The configured rules already keep every window of this length within its quota.
      teach('policy', policy.windowMs, policy.quota, policy.quota, 0, false);
    } else {
      teach('policy', policy.windowMs, policy.quota, undefined, 0, false);
    }
  }
  if (published.limit !== undefined && windowed.length === 1) {
    const rule = windowed[0]!;
    // A policy of the same window says more (its own window): it wins.
    // It names no window: the rule's is a guess, which may lower the rule but never raise it.
    if (!entries.some((entry) => entry.windowMs === rule.windowMs)) teach('limit', rule.windowMs, published.limit, rule.limit, rule.limit, false);
  } else if (published.limit !== undefined && windowed.length > 1) {
    report?.(
      `ignored X-RateLimit-Limit ${published.limit}: it names no window, and the key has ${windowed.length} rules of a window (the vendor's RateLimit-Policy, or a limit written 100;w=60, names it)`,
    );
  }
  for (const { windowMs, remaining, resetMs } of published.remaining) {
    const window = windowMs ?? (windowed.length === 1 ? windowed[0]!.windowMs : undefined);
    if (window === undefined || resetMs <= 0) continue;
    // The limit of the window: one published above its rule (`aboveRules`), the rule's, or the
    // policy's quota for a window no rule has (within the history kept).
    const limit =
      entries.find((entry) => entry.aboveRules === true && entry.windowMs === window)?.limit ??
      windowed.find((rule) => rule.windowMs === window)?.limit ??
      (window <= retainMs ? tightest.get(window)?.quota : undefined);
    if (limit === undefined || remaining > limit / 2) continue;
    entries.push({ mode: 'hold', source: windowMs === undefined ? 'limit' : 'policy', windowMs: window, limit, remaining, lapseMs: Math.min(resetMs, window) });
  }
  return entries;
}
