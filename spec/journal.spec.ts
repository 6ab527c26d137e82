/**
 * The recovery journal (Journal in lib/journal.ts): what a process would put back into a store that
 * lost its data. Every call that may still count is listed, none that no longer counts.
 */
import { expect } from 'chai';
import { Journal } from '../lib/journal.js';

const RETAIN = 1_000;
const MAX_HOLD = 500;
const member = (number: number): string => `${number}.tag`;
const numberOf = (name: string): number => Number.parseInt(name, 10);
/** Completions as the store sends them to the journal: NUMBER, RELEASE_AT pairs (-1: given back). */
const pairsOf = (settle: ReadonlyArray<{ member: string; releaseAt: number | null }>): number[] =>
  settle.flatMap(({ member, releaseAt }) => [numberOf(member), releaseAt ?? -1]);

describe('recovery journal', () => {
  it('lists calls in flight by their bound and completed calls by their completion; a released call is gone', () => {
    const journal = new Journal(member);
    journal.book('ns', 'k', 1, 3, 100 + MAX_HOLD, RETAIN);
    journal.settle(
      'ns',
      'k',
      pairsOf([
        { member: '1.tag', releaseAt: 140 },
        { member: '2.tag', releaseAt: null },
      ]),
    );
    // A completion sent again (a retried write) changes nothing.
    journal.settle('ns', 'k', pairsOf([{ member: '1.tag', releaseAt: 145 }]));
    const [key] = journal.entriesOf('ns', 150);
    expect(key!.key).to.equal('k');
    expect(key!.retainMs).to.equal(RETAIN);
    expect(key!.entries).to.have.deep.members([
      { number: 3, member: '3.tag', score: 100 + MAX_HOLD },
      { number: 1, member: '1.tag', score: 140 },
    ]);
    expect(journal.prune(150)).to.equal(2);
    // Settles of another key, or of slots it never booked, change nothing.
    journal.settle('ns', 'other', pairsOf([{ member: '3.tag', releaseAt: 150 }]));
    journal.settle('ns', 'k', pairsOf([{ member: '9.tag', releaseAt: 150 }]));
    expect(journal.keyEntries('ns', 'k', 150)).to.have.length(2);
    expect(journal.keyEntries('ns', 'other', 150)).to.deep.equal([]);
  });

  it('keeps a completion that came after the bound at the bound, as the store does', () => {
    const journal = new Journal(member);
    journal.book('ns', 'k', 7, 1, 100 + MAX_HOLD, RETAIN);
    journal.settle('ns', 'k', pairsOf([{ member: '7.tag', releaseAt: 100 + MAX_HOLD + 250 }]));
    expect(journal.keyEntries('ns', 'k', 700)).to.deep.equal([{ number: 7, member: '7.tag', score: 100 + MAX_HOLD }]);
    expect(journal.prune(100 + MAX_HOLD + RETAIN - 1)).to.equal(1);
    expect(journal.prune(100 + MAX_HOLD + RETAIN)).to.equal(0);
  });

  it('drops a completed call once its window is over, and a call without a completion once its bound is', () => {
    const journal = new Journal(member);
    journal.book('ns', 'k', 1, 2, 100 + MAX_HOLD, RETAIN);
    journal.settle('ns', 'k', pairsOf([{ member: '1.tag', releaseAt: 100 }]));
    expect(journal.prune(100 + RETAIN - 1)).to.equal(2);
    expect(journal.prune(100 + RETAIN)).to.equal(1);
    expect(journal.keyEntries('ns', 'k', 100 + RETAIN)).to.deep.equal([{ number: 2, member: '2.tag', score: 100 + MAX_HOLD }]);
    expect(journal.prune(100 + MAX_HOLD + RETAIN - 1)).to.equal(1);
    expect(journal.prune(100 + MAX_HOLD + RETAIN)).to.equal(0);
    expect(journal.namespaces()).to.deep.equal([]);
    expect(journal.entriesOf('ns', 100 + MAX_HOLD + RETAIN)).to.deep.equal([]);
  });

  it('keeps the longest history a key was booked with', () => {
    const journal = new Journal(member);
    journal.book('ns', 'k', 1, 1, 100, RETAIN);
    journal.book('ns', 'k', 2, 1, 100, 3 * RETAIN);
    journal.book('ns', 'k', 3, 1, 100, RETAIN);
    expect(journal.entriesOf('ns', 100)[0]!.retainMs).to.equal(3 * RETAIN);
    expect(journal.keyEntries('ns', 'k', 100 + 3 * RETAIN - 1)).to.have.length(3);
    expect(journal.prune(100 + 3 * RETAIN)).to.equal(0);
  });

  it('never lists a completed call that no longer counts, even when completions came out of order', () => {
    const journal = new Journal(member);
    journal.book('ns', 'k', 1, 2, 100 + MAX_HOLD, RETAIN);
    // The later completion is written first.
    journal.settle('ns', 'k', pairsOf([{ member: '2.tag', releaseAt: 300 }]));
    journal.settle('ns', 'k', pairsOf([{ member: '1.tag', releaseAt: 100 }]));
    const at = 100 + RETAIN;
    expect(journal.keyEntries('ns', 'k', at)).to.deep.equal([{ number: 2, member: '2.tag', score: 300 }]);
    expect(journal.entriesOf('ns', at)[0]!.entries).to.deep.equal([{ number: 2, member: '2.tag', score: 300 }]);
    expect(journal.prune(300 + RETAIN)).to.equal(0);
  });

  it('keeps every call of a long window, and forgets them as they leave it (thousands per key)', () => {
    const journal = new Journal(member);
    journal.book('ns', 'k', 1, 5_000, 10_000, RETAIN);
    journal.settle('ns', 'k', pairsOf(Array.from({ length: 5_000 }, (_, i) => ({ member: member(i + 1), releaseAt: i }))));
    expect(journal.prune(0)).to.equal(5_000);
    // 3,000 have left their window (the arrays are compacted): the rest is listed exactly, in full.
    expect(journal.prune(2_999 + RETAIN)).to.equal(2_000);
    const entries = journal.keyEntries('ns', 'k', 2_999 + RETAIN);
    expect(entries).to.have.length(2_000);
    expect(entries[0]).to.deep.equal({ number: 3001, member: '3001.tag', score: 3_000 });
    expect(entries.at(-1)).to.deep.equal({ number: 5000, member: '5000.tag', score: 4_999 });
    // Calls put back for the local fallback count like the others.
    journal.restored('ns', 'k', [{ number: 6_000, score: 5_000 }], RETAIN);
    expect(journal.keyEntries('ns', 'k', 5_000 + RETAIN - 1)).to.deep.equal([{ number: 6000, member: '6000.tag', score: 5_000 }]);
    expect(journal.prune(5_000 + RETAIN)).to.equal(0);
    expect(journal.namespaces()).to.deep.equal([]);
  });

  it('remove() takes the slots another store now holds out, calls in flight and completed alike, and keeps the rest', () => {
    const journal = new Journal(member);
    journal.book('ns', 'k', 1, 4, 100 + MAX_HOLD, RETAIN);
    journal.settle(
      'ns',
      'k',
      pairsOf([
        { member: '1.tag', releaseAt: 120 },
        { member: '2.tag', releaseAt: 130 },
      ]),
    );
    journal.remove('ns', 'k', new Set([1, 3]));
    expect(journal.size).to.equal(2);
    expect(journal.keyEntries('ns', 'k', 150)).to.have.deep.members([
      { number: 2, member: '2.tag', score: 130 },
      { number: 4, member: '4.tag', score: 100 + MAX_HOLD },
    ]);
    journal.remove('ns', 'k', new Set([2, 4]));
    expect(journal.size).to.equal(0);
    expect(journal.namespaces()).to.deep.equal([]);
  });
  it("puts back a claim's pointer keys with the key's calls, and counts them as held until their life ends, after the call's slot no longer counts", () => {
    const journal = new Journal(member);
    journal.book('ns', 'k', 1, 1, 100 + MAX_HOLD, RETAIN);
    journal.settle('ns', 'k', [1, 150]);
    journal.claimed('ns', 'k', [['vt:ns:{k}:meta:claimed:10000000000000', '1.tag']], 100 + MAX_HOLD + RETAIN + 500, RETAIN);
    expect(journal.entriesOf('ns', 200)).to.deep.equal([
      {
        key: 'k',
        retainMs: RETAIN,
        entries: [{ number: 1, member: '1.tag', score: 150 }],
        pointers: [['vt:ns:{k}:meta:claimed:10000000000000', '1.tag', 1_900]],
      },
    ]);
    // The call's slot is gone (150 + RETAIN), the pointer lives on: the heartbeat must go on.
    expect(journal.prune(1_500)).to.equal(1);
    expect(journal.entriesOf('ns', 1_500)[0]!.pointers).to.deep.equal([['vt:ns:{k}:meta:claimed:10000000000000', '1.tag', 600]]);
    expect(journal.prune(2_100)).to.equal(0);
    expect(journal.entriesOf('ns', 2_100)).to.deep.equal([]);
  });

  it("puts back a slot numbered from witnessBelow (a reservation started as this process's call), but never takes it as the key's witness", () => {
    const RESERVED = 1_000_000;
    const journal = new Journal(member, RESERVED);
    journal.book('ns', 'k', 5, 1, 100 + MAX_HOLD, RETAIN);
    journal.book('ns', 'k', RESERVED + 1, 1, 120 + MAX_HOLD, RETAIN);
    journal.settle('ns', 'k', [RESERVED + 1, 130]);
    expect(journal.keyEntries('ns', 'k', 200).map((entry) => entry.number)).to.have.members([5, RESERVED + 1]);
    expect(journal.witness('ns', 'k', 200)?.number, 'the slot booked last among the numbers it can tell apart').to.equal(5);
    journal.settle('ns', 'k', [5, 140]);
    expect(journal.witness('ns', 'k', 200)?.number).to.equal(5);
    // Only such slots: no witness (the key is not checked on their account), still put back.
    const own = new Journal(member, RESERVED);
    own.book('ns', 'k', RESERVED + 2, 1, 100 + MAX_HOLD, RETAIN);
    expect(own.witness('ns', 'k', 200)).to.equal(undefined);
    expect(own.keyEntries('ns', 'k', 200)).to.have.length(1);
  });
});
