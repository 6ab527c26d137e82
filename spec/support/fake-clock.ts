import * as FakeTimers from '@sinonjs/fake-timers';

type InstalledClock = ReturnType<typeof FakeTimers.install>;

/** Installs fake timers (setTimeout, Date, performance) for each test of the suite it is called in. */
export function useFakeClock(): { readonly clock: InstalledClock } {
  const holder = {} as { clock: InstalledClock };
  beforeEach(() => {
    holder.clock = FakeTimers.install({
      now: 1_000_000,
      toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'setImmediate', 'clearImmediate', 'Date', 'performance'],
    });
  });
  afterEach(() => holder.clock.uninstall());
  return holder;
}
