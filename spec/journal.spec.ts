/**
 * The recovery journal (lib/stores/journal.ts): what a process would put back into a store that
 * lost its data. Every call that may still count is listed, none that no longer counts.
 */
import { expect } from 'chai';
import { Journal } from '../lib/stores/journal.js';

const RETAIN = 1_000;
const MAX_HOLD = 500;

describe('recovery journal', () => {
  it('lists calls in flight by their estimate and completed calls by their completion; a released call is gone', () => {
    const journal = new Journal();
    journal.book('ns', 'k', ['1', '2', '3'], 100, RETAIN, MAX_HOLD, 0);
    journal.settle('ns', 'k', [
      { member: '1', releaseAt: 40 },
      { member: '2', releaseAt: null },
    ]);
    // A completion sent again (a retried write) changes nothing.
    journal.settle('ns', 'k', [{ member: '1', releaseAt: 45 }]);
    const [key] = journal.entriesOf('ns', 50);
    expect(key!.key).to.equal('k');
    expect(key!.entries).to.have.deep.members([
      { member: '3', score: 100, settled: false },
      { member: '1', score: 40, settled: true },
    ]);
    expect(journal.prune(50)).to.equal(2);
  });

  it('drops a completed call once its window is over, and a call without a completion maxHoldMs later', () => {
    const journal = new Journal();
    journal.book('ns', 'k', ['1', '2'], 100, RETAIN, MAX_HOLD, 0);
    journal.settle('ns', 'k', [{ member: '1', releaseAt: 100 }]);
    expect(journal.prune(100 + RETAIN - 1)).to.equal(2);
    expect(journal.prune(100 + RETAIN)).to.equal(1);
    expect(journal.keyEntries('ns', 'k', 100 + RETAIN).entries).to.deep.equal([{ member: '2', score: 100, settled: false }]);
    expect(journal.prune(100 + RETAIN + MAX_HOLD)).to.equal(0);
    expect(journal.namespaces()).to.deep.equal([]);
  });

  it('never lists a completed call that no longer counts, even when completions came out of order', () => {
    const journal = new Journal();
    journal.book('ns', 'k', ['1', '2'], 100, RETAIN, MAX_HOLD, 0);
    // The later completion is written first.
    journal.settle('ns', 'k', [{ member: '2', releaseAt: 300 }]);
    journal.settle('ns', 'k', [{ member: '1', releaseAt: 100 }]);
    const at = 100 + RETAIN;
    expect(journal.keyEntries('ns', 'k', at).entries).to.deep.equal([{ member: '2', score: 300, settled: true }]);
    expect(journal.entriesOf('ns', at)[0]!.entries).to.deep.equal([{ member: '2', score: 300, settled: true }]);
    expect(journal.prune(300 + RETAIN)).to.equal(0);
  });

  it('keeps every call of a long window, and forgets them as they leave it (thousands per key)', () => {
    const journal = new Journal();
    const members = Array.from({ length: 5_000 }, (_, i) => String(i + 1));
    journal.book('ns', 'k', members, 0, RETAIN, MAX_HOLD, 0);
    journal.settle('ns', 'k', members.map((member, i) => ({ member, releaseAt: i })));
    expect(journal.prune(0)).to.equal(5_000);
    // 3,000 have left their window (the arrays are compacted): the rest is listed exactly, in full.
    expect(journal.prune(2_999 + RETAIN)).to.equal(2_000);
    const entries = journal.keyEntries('ns', 'k', 2_999 + RETAIN).entries;
    expect(entries).to.have.length(2_000);
    expect(entries[0]).to.deep.equal({ member: '3001', score: 3_000, settled: true });
    expect(entries.at(-1)).to.deep.equal({ member: '5000', score: 4_999, settled: true });
    // Calls put back for the local fallback count like the others.
    journal.restored('ns', 'k', [{ member: '6000', score: 5_000 }], RETAIN, MAX_HOLD);
    expect(journal.keyEntries('ns', 'k', 5_000 + RETAIN - 1).entries).to.deep.equal([{ member: '6000', score: 5_000, settled: true }]);
    expect(journal.prune(5_000 + RETAIN)).to.equal(0);
  });
});
