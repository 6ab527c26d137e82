/**
 * A script call written as one Redis command (RESP) into one Buffer, its keys written from their
 * parts: no string per key name, no buffer per argument. The ioredis driver sends the batch this
 * way (lib/stores/redis-client.ts); the other paths take the keys as strings (`ScriptKeys.list`).
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

function digits(value: number): number {
  let n = 1;
  while (value >= 10) {
    value = Math.floor(value / 10);
    n += 1;
  }
  return n;
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
