--[[
  learn: what the vendor said of one key's limits (Throttle.learn), for every process. Each entry
  applies to its WINDOW, in its MODE:

  - `s` (set: a limit the vendor published): replaces what the key learned for the window, and
    lapses LAPSE ms from now unless learned again; LIMIT 0 forgets what SOURCE taught there (the
    vendor allows the configured rule again; only an entry of SOURCE in the same case). SOURCE in
    capitals: the limit applies even above the configured rule of its window (learnAboveRules).
  - `d` (down: the vendor refused a call): LIMIT is the rule's configured limit. The calls of the
    key that started within the window (C, slots booked ahead left out) were more than the vendor
    took: the N-th refusal of a window of refusals (one that began less than WINDOW ago) says it took
    at most C - N. The key learns min(its limit in force, C - N), and one less than its limit in
    force on a window's first refusal, never below FLOOR (ARG); one learned below FLOOR comes up to
    it. Down from a limit in force above the rule, it is kept in capitals (`R`): above the rule.
  - `u` (up: a probe, the vendor took calls and refused none): a limit learned from refusals rises
    by a tenth (at least 1) two windows after the refusals lowered it, or one after it last rose,
    and a new window begins; at LIMIT (the configured one) it is forgotten.
  - `h` (hold: the vendor says REMAINING (ARG) calls remain until its reset, LAPSE ms from now;
    LIMIT is the window's limit): where the log leaves room for more (its limit in force less the
    slots that count in the window), the difference is held: slots of calls this store did not make
    (the vendor counted them: another client on the same account), counting until the reset.

  A limit learned lower than before applies to calls already in the log, which count against it at
  once. Slots booked ahead were booked under the old limit: they are taken out of the log and the
  key is paused until the last of them would have started, as pause.lua does for a vendor pause, so
  that each of their calls learns of it when its start comes and books again under the new limit.
  The pause is announced on CHANNEL.

  KEYS[1]  meta      hash of the key (includes/log.lua); field `l` = the learned limits
  KEYS[2]  log       sorted set of the key's slots
  KEYS[3]  kept      the namespace's index of kept keys (includes/log.lua); none on a Cluster
  KEYS[4]  mark      the namespace's mark (includes/log.lua); none on a Cluster
  ARGV[1]  MAX_HOLD  the caller's maxHoldMs: a slot scored above now + MAX_HOLD was booked ahead
  ARGV[2]  CHANNEL   the namespace's pause channel ('': not announced)
  ARGV[3]  N, then N entries: LIMIT, WINDOW (ms), LAPSE (ms from now), SOURCE (one letter), MODE,
           ARG (mode `h`: REMAINING; mode `d`: FLOOR; mode `s`: CONFIG, the window's configured
           limit, 0 for a window no rule has; else 0)

  Returns { changed (1 when a limit in force changed), pause end set (0: none), slots held, then
  per entry in force: LIMIT, WINDOW, LAPSE_IN_MS, SOURCE }.
]]
--- @include "log"
--- @include "learned"

local meta, log = KEYS[1], KEYS[2]
vt_namespace(KEYS[3], KEYS[4])
local now = vt_now()
local now_ms = math.ceil(now)
local entries = vt_learned_parse(redis.call('HGET', meta, 'l'), now)
local changed, lowered = false, false
local max_hold = tonumber(ARGV[1])
local above = '+inf'
if max_hold > 0 then above = vt_booked_ahead_above(now, max_hold) end
local held = 0
local n = tonumber(ARGV[3])
for e = 0, n - 1 do
  local limit, window = tonumber(ARGV[4 + 6 * e]), tonumber(ARGV[5 + 6 * e])
  local lapse, source, mode = now_ms + tonumber(ARGV[6 + 6 * e]), ARGV[7 + 6 * e], ARGV[8 + 6 * e]
  local at = nil
  for k, entry in ipairs(entries) do
    if entry[2] == window then at = k end
  end
  local entry = at and entries[at]
  if mode == 'h' then
    local current = vt_learned_limit(limit, entry)
    local counted = redis.call('ZCOUNT', log, '(' .. (math.floor(now) - window), '+inf')
    local more = current - counted - tonumber(ARGV[9 + 6 * e])
    if more > 0 then
      -- Counting until the reset (within the window): released at the reset less the window.
      local score = string.format('%d', math.min(lapse, now_ms + window) - window)
      -- In chunks: unpack() takes a few thousand values at most, and a limit may be large.
      for from = 1, more, 1000 do
        local args = {}
        for k = from, math.min(more, from + 999) do
          args[#args + 1] = score
          args[#args + 1] = string.format('held:%d:%d', now_ms, counted + k)
        end
        redis.call('ZADD', log, unpack(args))
      end
      vt_keep(log, math.min(lapse, now_ms + window) - now_ms + 1, now_ms)
      held, lowered = held + more, true
    end
  elseif mode == 'd' then
    local current, since, count = vt_learned_limit(limit, entry), now_ms, 1
    local refusals = entry and string.lower(entry[4]) == 'r'
    if refusals and now_ms - entry[5] < window then since, count = entry[5], entry[6] + 1 end
    local started = redis.call('ZCOUNT', log, '(' .. (math.floor(now) - window), above)
    -- The refused calls not all in the window (a call that outlasted it): no measure, one less.
    local measured = started - count
    if measured < 1 then measured = current - 1 end
    local learned = math.min(current, measured)
    if count == 1 then learned = math.min(learned, current - 1) end
    local floor = math.max(1, tonumber(ARGV[9 + 6 * e]))
    learned = math.max(floor, learned)
    -- Down from a limit in force above the rule (learnAboveRules): it stays above the rule, in capitals.
    local letter = 'r'
    if entry and string.byte(entry[4]) < 97 then letter = 'R' end
    if learned < current then
      changed, lowered = true, true
      entries[at or #entries + 1] = { learned, window, lapse, letter, since, count }
    elseif refusals then
      -- At the floor: the refusal still counts in its window. One learned under a lower floor comes up to this one.
      local kept = entry[1]
      if kept < floor then
        kept = math.min(floor, limit)
        changed = true
      end
      entries[at] = { kept, window, lapse, entry[4], since, count }
    end
  elseif mode == 'u' then
    -- Two windows after a refusal lowered it, one after a rise: a probe that was refused waits longer.
    local wait = window
    if entry and entry[6] > 0 then wait = 2 * window end
    if entry and string.lower(entry[4]) == 'r' and now_ms - entry[5] >= wait then
      local raised = entry[1] + math.max(1, math.floor(entry[1] / 10))
      if raised >= limit then table.remove(entries, at) else entries[at] = { raised, window, lapse, entry[4], now_ms, 0 } end
      changed = true
    end
  else
    -- Set, or forget (LIMIT 0): lowered when the limit in force goes down. CONFIG (ARG): the
    -- configured limit of the window (0: a window no rule has).
    local config = tonumber(ARGV[9 + 6 * e])
    local before = vt_learned_in_force(config, entry)
    if limit == 0 then
      -- Only what SOURCE taught, in its case: a process without learnAboveRules forgets no limit learned above the rules.
      if at ~= nil and entries[at][4] == source then
        table.remove(entries, at)
        changed = true
        if vt_learned_in_force(config, nil) < before then lowered = true end
      end
    else
      local replaced = { limit, window, lapse, source, 0, 0 }
      if entry == nil or limit ~= entry[1] or source ~= entry[4] then changed = true end
      if vt_learned_in_force(config, replaced) < before then lowered = true end
      entries[at or #entries + 1] = replaced
    end
  end
end

local lapse_most = 0
for _, entry in ipairs(entries) do lapse_most = math.max(lapse_most, entry[3]) end
if #entries == 0 then
  redis.call('HDEL', meta, 'l')
else
  redis.call('HSET', meta, 'l', vt_learned_format(entries))
  -- Decisions read the key's meta while the namespace's mark lies ahead; meta lives as long.
  vt_mark(lapse_most)
  vt_keep(meta, lapse_most - now_ms + 1, now_ms)
end

local pause_end = 0
if lowered and max_hold > 0 then
  local top = redis.call('ZREVRANGEBYSCORE', log, '+inf', '(' .. above, 'WITHSCORES', 'LIMIT', 0, 1)
  if top[2] ~= nil then
    pause_end = math.max(math.ceil(tonumber(top[2]) - max_hold) + 1, tonumber(redis.call('HGET', meta, 'pause') or 0))
    redis.call('ZREMRANGEBYSCORE', log, '(' .. above, '+inf')
    vt_took_out(log, meta, tonumber(top[2]), now)
    redis.call('HSET', meta, 'pause', pause_end)
    vt_mark(pause_end)
    vt_keep(meta, pause_end - now_ms + 1, now_ms)
    if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], string.format('%d', pause_end) .. ' ' .. vt_user_key(log)) end
  end
end

local result = { changed and 1 or 0, pause_end, held }
vt_learned_reply(entries, now_ms, result)
return result
