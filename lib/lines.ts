import { keysOf } from './calls.js';
import type { Call } from './decisions.js';
import type { ReserveResult } from './store.js';
import type { KeyLine } from './waiting.js';

/**
 * A throttle's lines in this process (lib/waiting.ts): one per key, and one per set of keys for
 * calls that count in several (`Call.line`). Knows which lines hold each key, so that a completion
 * announced on a key wakes every line that waits on it, and so that this process leaves a key's
 * list of waiting processes only when no line of it holds the key any more.
 */
export class Lines {
  readonly #lines = new Map<string, KeyLine<Call>>();
  /** Lines with a call asked without a line (none of the line's calls waited), until it is answered. */
  readonly #alone = new Map<string, Promise<unknown>>();
  /** Per encoded key, the lines of several keys that hold it (asked alone or in line), with how many reasons each. */
  readonly #several = new Map<string, Map<string, number>>();
  /** Keys whose list of waiting processes may hold this process (a decision on them was deferred, or kept it there). */
  readonly #listed = new Set<string>();
  /** Per line of several keys, its turn (see `#turn`), while it is held. */
  readonly #turns = new Map<string, number>();
  #served = 0;

  get(line: string): KeyLine<Call> | undefined {
    return this.#lines.get(line);
  }

  set(call: Call, line: KeyLine<Call>): void {
    this.#lines.set(call.line, line);
    this.#hold(call, 1);
  }

  /** Forgets `line` if it is still the call's line. */
  delete(call: Call, line: KeyLine<Call>): void {
    if (this.#lines.get(call.line) !== line) return;
    this.#lines.delete(call.line);
    this.#hold(call, -1);
  }

  isAlone(line: string): boolean {
    return this.#alone.has(line);
  }

  alone(call: Call, asked: Promise<unknown>): void {
    this.#alone.set(call.line, asked);
    this.#hold(call, 1);
  }

  doneAlone(call: Call): void {
    if (this.#alone.delete(call.line)) this.#hold(call, -1);
  }

  /** Calls asked alone, still unanswered. */
  get asking(): Iterable<Promise<unknown>> {
    return this.#alone.values();
  }

  /** A completion was announced on the key ('': on any key): the lines that hold it may ask again. */
  wake(key: string): void {
    if (key === '') {
      for (const line of this.#lines.values()) line.wake();
      return;
    }
    this.#lines.get(key)?.wake();
    const several = this.#several.get(key);
    if (several === undefined) return;
    // Lines served least lately first: their asks go first in the batch (see `served`).
    const ids = [...several.keys()].sort((a, b) => this.#turn(a) - this.#turn(b));
    for (const id of ids) this.#lines.get(id)?.wake();
  }

  /**
   * A call of several keys was booked: its line goes behind the other lines of its keys, so that
   * when a completion wakes them, the lines that waited longest ask first (users take turns at an
   * app-wide key).
   */
  served(call: Call): void {
    if (call.also.length > 0 && this.#turns.has(call.line)) this.#turns.set(call.line, ++this.#served);
  }

  /**
   * When the line was last served (a count of bookings); a line never served yet comes first, in
   * an order drawn at random, so that processes whose lines were made in the same order (one per
   * user, user by user) do not all serve the same users first. A line that empties is forgotten: a
   * user whose calls come one at a time counts as not served lately, and goes ahead of backlogs.
   */
  #turn(line: string): number {
    let turn = this.#turns.get(line);
    if (turn === undefined) this.#turns.set(line, (turn = -Math.random()));
    return turn;
  }

  /** Whether a line of several keys holds the key (this process stays in its waiting list). */
  stays(key: string): boolean {
    return this.#several.has(key);
  }

  /**
   * The store answered a decision for `call` (`stay`: as sent). A deferred one lists this process
   * on the call's keys; one of a single key that waits no more, sent without `stay`, took it off.
   */
  answered(call: Call, result: ReserveResult, stay: boolean): void {
    if (result.status === 'deferred') for (const key of keysOf(call)) this.#listed.add(key);
    else if (call.also.length === 0 && !stay) this.#listed.delete(call.encoded);
  }

  /**
   * The keys of `call` whose waiting lists this process should leave now that the call's line (or
   * its call asked alone) goes: those it may be listed on that no other line of it holds. They
   * count as left.
   */
  leaving(call: Call): string[] {
    return keysOf(call).filter((key) => {
      if (!this.#listed.has(key)) return false;
      if (key !== call.line && (this.#lines.has(key) || this.#alone.has(key))) return false;
      const several = this.#several.get(key);
      if (several !== undefined && (several.size > 1 || !several.has(call.line))) return false;
      this.#listed.delete(key);
      return true;
    });
  }

  /** Calls waiting in line: in all lines, or in the lines that hold one key. */
  queued(key?: string): number {
    if (key === undefined) {
      let queued = 0;
      for (const line of this.#lines.values()) queued += line.size;
      return queued;
    }
    let queued = this.#lines.get(key)?.size ?? 0;
    for (const id of this.#several.get(key)?.keys() ?? []) queued += this.#lines.get(id)?.size ?? 0;
    return queued;
  }

  get size(): number {
    return this.#lines.size;
  }

  /** Takes every line out, for `close()`, with the keys this process may be listed on (to leave). */
  drain(): { lines: Array<KeyLine<Call>>; listed: string[] } {
    const lines = [...this.#lines.values()];
    const listed = [...this.#listed];
    this.#lines.clear();
    this.#several.clear();
    this.#turns.clear();
    this.#listed.clear();
    return { lines, listed };
  }

  #hold(call: Call, by: 1 | -1): void {
    if (call.also.length === 0) return;
    if (by > 0) this.#turn(call.line);
    for (const key of keysOf(call)) {
      let lines = this.#several.get(key);
      if (!lines) this.#several.set(key, (lines = new Map()));
      const count = (lines.get(call.line) ?? 0) + by;
      if (count > 0) lines.set(call.line, count);
      else lines.delete(call.line);
      if (lines.size === 0) this.#several.delete(key);
    }
    if (!this.#several.get(call.encoded)?.has(call.line)) this.#turns.delete(call.line);
  }
}
