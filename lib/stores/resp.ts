/**
 * The bytes of a script call. The call written as one Redis command (RESP) into one Buffer, its keys
 * written from their parts: no string per key name, no buffer per argument. The ioredis driver sends
 * the batch this way (lib/stores/redis-client.ts); the other paths take the keys as strings
 * (`ScriptKeys.list`). And the batch's fields packed as one MessagePack array (`packNumbers`).
 */

/** The keys of one script call. */
export interface ScriptKeys {
  readonly count: number;
  /** Every key as a string, in order. */
  list(): string[];
  /** Bytes the keys take as RESP bulk strings. */
  byteLength(): number;
  /** Writes the keys as RESP bulk strings at `at`; returns the offset after them. */
  write(out: Buffer, at: number): number;
}

/** An argument of a script call. */
export type ScriptArg = string | number | Buffer;

/**
 * `EVALSHA sha count keys... args...` as one Buffer. Numbers go as their decimal text, as the
 * clients send them.
 */
export function evalShaCommand(sha: string, keys: ScriptKeys, args: readonly ScriptArg[]): Buffer {
  const texts = args.map((arg) => (typeof arg === 'number' ? String(arg) : arg));
  const count = String(keys.count);
  let size = arrayHeaderLength(3 + keys.count + texts.length) + bulkLength(7) + bulkLength(sha.length) + bulkLength(count.length) + keys.byteLength();
  for (const text of texts) size += bulkLength(typeof text === 'string' ? textLength(text) : text.length);
  const out = Buffer.allocUnsafe(size);
  let at = writeArrayHeader(out, 0, 3 + keys.count + texts.length);
  at = writeBulk(out, at, 'EVALSHA');
  at = writeBulk(out, at, sha);
  at = writeBulk(out, at, count);
  at = keys.write(out, at);
  for (const text of texts) at = typeof text === 'string' ? writeBulk(out, at, text) : writeBulkBuffer(out, at, text);
  if (at !== size) throw new Error(`evalShaCommand wrote ${at} bytes of ${size}`);
  return out;
}

/** UTF-8 bytes of `text` (its length when it is ASCII, as key names are). */
export function textLength(text: string): number {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) >= 0x80) return Buffer.byteLength(text);
  return text.length;
}

/** Bytes of a bulk string of `length` bytes: `$<length>\r\n<bytes>\r\n`. */
export function bulkLength(length: number): number {
  return 1 + digits(length) + 2 + length + 2;
}

function arrayHeaderLength(count: number): number {
  return 1 + digits(count) + 2;
}

function writeArrayHeader(out: Buffer, at: number, count: number): number {
  out[at++] = 0x2a; // '*'
  at = writeDecimal(out, at, count);
  out[at++] = 0x0d;
  out[at++] = 0x0a;
  return at;
}

/** `$<length>\r\n`. */
export function writeBulkHeader(out: Buffer, at: number, length: number): number {
  out[at++] = 0x24; // '$'
  at = writeDecimal(out, at, length);
  out[at++] = 0x0d;
  out[at++] = 0x0a;
  return at;
}

export function writeCrlf(out: Buffer, at: number): number {
  out[at++] = 0x0d;
  out[at++] = 0x0a;
  return at;
}

function writeBulk(out: Buffer, at: number, text: string): number {
  at = writeBulkHeader(out, at, textLength(text));
  return writeCrlf(out, writeText(out, at, text));
}

function writeBulkBuffer(out: Buffer, at: number, bytes: Buffer): number {
  at = writeBulkHeader(out, at, bytes.length);
  bytes.copy(out, at);
  return writeCrlf(out, at + bytes.length);
}

/** Copies a few bytes (a key name's fixed parts) at `at`; returns the offset after them. */
export function writeBytes(out: Buffer, at: number, bytes: Uint8Array): number {
  for (let i = 0; i < bytes.length; i++) out[at++] = bytes[i]!;
  return at;
}

/** Writes `text` as UTF-8 at `at` (byte by byte while it is ASCII: key names are short); returns the offset after it. */
export function writeText(out: Buffer, at: number, text: string): number {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code >= 0x80) return at - i + out.write(text, at - i);
    out[at++] = code;
  }
  return at;
}

function writeDecimal(out: Buffer, at: number, value: number): number {
  const end = at + digits(value);
  let i = end;
  do {
    out[--i] = 0x30 + (value % 10);
    value = Math.floor(value / 10);
  } while (value > 0);
  return end;
}

/**
 * `first`, then `head` and the first `restLength` numbers of `rest`, as one MessagePack array of numbers, which lua/batch.lua unpacks with
 * Redis's `cmsgpack` (in C: measured 4.5 µs of Redis CPU less per call than splitting a text).
 * Integers of 0 to 127 take one byte, other 32-bit ones five; the rest (times in ms, fractions) go
 * as doubles, nine bytes, exact for integers below 2^53. The first `textCount` places of `textAt`
 * (ascending, each a whole number >= 0 below 2^53) name the numbers of `rest` that go as text
 * instead, their decimal digits (a MessagePack string), which Lua hands to Redis as they are.
 */
export function packNumbers(
  first: number,
  head: readonly number[],
  rest: readonly number[] = [],
  restLength = rest.length,
  textAt: readonly number[] = [],
  textCount = 0,
): Buffer {
  let size = 5 + byteLength(first);
  // Indexed loops: an iterator would box every double it hands out.
  for (let i = 0; i < head.length; i++) size += byteLength(head[i]!);
  for (let i = 0, t = 0; i < restLength; i++) {
    if (t < textCount && textAt[t] === i) {
      size += 1 + digits(rest[i]!);
      t++;
    } else {
      size += byteLength(rest[i]!);
    }
  }
  const out = Buffer.allocUnsafe(size);
  out[0] = 0xdd;
  out.writeUInt32BE(1 + head.length + restLength, 1);
  let at = writeNumber(out, 5, first);
  for (let i = 0; i < head.length; i++) at = writeNumber(out, at, head[i]!);
  for (let i = 0, t = 0; i < restLength; i++) {
    if (t < textCount && textAt[t] === i) {
      at = writeDigits(out, at, rest[i]!);
      t++;
    } else {
      at = writeNumber(out, at, rest[i]!);
    }
  }
  return out;
}

/** Decimal digits of a whole number from 0 to 2^31 - 1. */
function smallDigits(value: number): number {
  if (value < 10_000) return value < 10 ? 1 : value < 100 ? 2 : value < 1000 ? 3 : 4;
  if (value < 100_000_000) return value < 100_000 ? 5 : value < 1_000_000 ? 6 : value < 10_000_000 ? 7 : 8;
  return value < 1_000_000_000 ? 9 : 10;
}

/** Decimal digits of a whole number >= 0 below 2^53 (a time in ms has 13). */
function digits(value: number): number {
  return value < 2 ** 31 ? smallDigits(value) : smallDigits(Math.floor(value / 1e8)) + 8;
}

/** Writes VALUE (0 to 2^31 - 1) as COUNT decimal digits ending before END, zeros in front. */
function writeSmallDigits(out: Buffer, end: number, value: number, count: number): void {
  let rest = value;
  for (let p = end - 1; p >= end - count; p--) {
    const next = (rest / 10) | 0;
    out[p] = 48 + rest - 10 * next;
    rest = next;
  }
}

/** A whole number >= 0 below 2^53 as a MessagePack fixstr of its decimal digits (16 at most). */
function writeDigits(out: Buffer, at: number, value: number): number {
  const count = digits(value);
  out[at] = 0xa0 | count;
  const end = at + 1 + count;
  if (value < 2 ** 31) {
    writeSmallDigits(out, end, value, count);
  } else {
    // Integer arithmetic on two halves: the eight low digits, then the rest.
    const high = Math.floor(value / 1e8);
    writeSmallDigits(out, end, value - high * 1e8, 8);
    writeSmallDigits(out, end - 8, high, count - 8);
  }
  return end;
}

function byteLength(value: number): number {
  if (value >= 0 && value < 128 && Number.isInteger(value)) return 1;
  return value >= -(2 ** 31) && value < 2 ** 31 && Number.isInteger(value) ? 5 : 9;
}

function writeNumber(out: Buffer, at: number, value: number): number {
  const length = byteLength(value);
  if (length === 1) {
    out[at] = value;
  } else if (length === 5) {
    out[at] = 0xd2;
    out.writeInt32BE(value, at + 1);
  } else {
    out[at] = 0xcb;
    out.writeDoubleBE(value, at + 1);
  }
  return at + length;
}
