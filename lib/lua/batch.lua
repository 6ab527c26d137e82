--[[
  batch: the decisions and completions one process has for Redis at one moment, in one atomic
  step: operations on several keys (a standalone Redis), or on one key (a Cluster, where one
  script only reaches keys of one slot). Each operation is described in its include.

  KEYS     for each key used, its two keys: log, meta (includes/log.lua); then, when EPOCH is not
           empty, the namespace's epoch key (epoch.lua); then, when KEPT is '1', the namespace's
           index of kept keys and its mark (includes/log.lua)
  ARGV[1]  EPOCH    the epoch value the caller knows ('' = no check)
  ARGV[2]  TAG      this process's member suffix (members are <number><TAG>), which also names it
                    in a key's list of waiting processes
  ARGV[3]  CHANNEL  the namespace's channel prefix: a completion wakes a waiting process on
                    CHANNEL followed by the process's tag
  ARGV[4]  GRACE    ms a key is held once found to have lost data (includes/check.lua)
  ARGV[5]  FIELDS   everything else, as one MessagePack array of numbers (or `x:` and its hex), A below (unpacked in C:
                    far cheaper than hundreds of arguments, or a text to split; packNumbers in
                    lib/stores/resp.ts). A member's NUMBER (FIRST), a witness's SCORE and a
                    completion's RELEASE_AT come as text, their digits, when whole and >= 0 (else
                    as numbers): the script hands them to Redis as they come, where a Lua number
                    would be formatted (%.17g) on every use:
  ARGV[6]  KEPT     '1': the last two keys are the index of kept keys and the mark (a standalone Redis)
  ARGV[7]  SOFT     '1': a batch of checks alone; an epoch that changed does not stop it (each key
                    then compares the Redis that took its bookings, meta `r`, as without EPOCH)
  ARGV[8]  EVICTED  optional, '1': `evicted_keys` of INFO stats is read for the eviction watch
                    (lib/stores/redis-evictions.ts), the recovery heartbeat's reading riding the batch
  ARGV[9]… ALIVE    optional, a standalone Redis: N, HOLD, KEEP_MS, SWEEP, READ; the last key is then
                    the namespace's liveness stamps (alive.lua), after the index and the mark. N >= 0:
                    this process's stamp rides the batch, written as alive.lua 'stamp' writes it (N,
                    HOLD, KEEP_MS, SWEEP '1'); READ '1': the stamps are read, as alive.lua 'read' does
  A[1]     S        number of rule sets, followed by S sets: MAX_HOLD, RETAIN, RESERVED, R, then R
                    triples LIMIT, WINDOW, BUCKET (includes/decide.lua); RESERVED -1, or the set's
                    calls are reservations, never deferred, and it is their grace within MAX_HOLD
                    (includes/decide.lua, vt_bounds and vt_deps)
           then the operations, to the end of A, each its code (VT_OP_*, declared with the other
           codes in lib/stores/redis-scripts.ts, CODES) and its fields; K names a key, KEYS[2K-1 .. 2K]:
             DECIDE       K, SET (1-based), COST, STAY, COUNT, then COUNT pairs MAX_DELAY, FIRST:
                          COUNT calls of one key (includes/decide.lua)
             DECIDE_KEYS  N, then N pairs K, SET, then COST, MAX_DELAY, FIRST: one call in several
                          keys at once (a standalone Redis, or keys of one slot)
             COMPLETE     K, N, then N pairs NUMBER, RELEASE_AT (includes/complete.lua)
             LEAVE        K: this process no longer waits on the key (it leaves its waiting list)
             CHECK        K, NUMBER, SCORE, KEY_UNTIL (includes/check.lua), before the key's decisions
             WITNESS      K, NUMBER, SCORE, KEY_UNTIL, DEADLINE: the same witness, checked by the key's
                          first booking of one slot (includes/decide.lua, vt_key_book), or looked up
                          after its decisions if none booked; DEADLINE: the life this process last
                          gave the log (store clock ms), valid while the witness is there. Before the
                          key's DECIDE operations; its calls of several keys use CHECK
             CHECK_FULL   the same, and the key's hold and replication id read too (the heartbeat's
                          check of a key no decision follows)
             TIDY         K, RETAIN (includes/complete.lua), after the key's other operations
             PAUSED       K: the end of the key's vendor pause (meta `pause`, 0 when none), read for a
                          call booked ahead whose start has come
           A decision on a key found lost (VT_CHECK_LOST) is not made: its calls are answered
           VT_STATUS_NOT_MADE. On a key held (VT_CHECK_HELD) it is made, and waits for the hold.

  Returns { VT_BATCH_EPOCH_CHANGED } when the epoch changed (the store lost its data; nothing was
  done), else { VT_BATCH_DONE (VT_BATCH_DONE_UNDER_CHANGED_EPOCH: a SOFT batch whose epoch was not
  the one sent), NOW_MS, then per decided call in order its five values, or the one
  VT_STATUS_BOOKED_NOW, or VT_STATUS_BOOKED_DEPS and five more (includes/decide.lua), then one per check (includes/check.lua), then one per
  PAUSED, then with EVICTED '1' the count (-1 where INFO is denied), then with ALIVE the stamp's time
  (-1: none written), then with READ '1' alive.lua 'read''s reply }: NOW_MS is the store clock (0 when
  no decision or check was asked for).
]]
--- @include "log"
--- @include "buckets"
--- @include "waiters"
--- @include "check"
--- @include "learned"
--- @include "decide"
--- @include "complete"
--- @include "alive"

-- Over a REST API (JSON carries no bytes) the packed fields come as `x:` and their hex.
local packed = ARGV[5]
if string.sub(packed, 1, 2) == 'x:' then
  packed = (string.gsub(string.sub(packed, 3), '%x%x', function(hex) return string.char(tonumber(hex, 16)) end))
end
local A = cmsgpack.unpack(packed)

local epoch_key = nil
local last_key = #KEYS
-- ALIVE: the stamps' key is the last one; the stamp and the read are done once the batch is.
local alive_key = nil
if ARGV[9] ~= nil then
  alive_key = KEYS[last_key]
  last_key = last_key - 1
end
if ARGV[6] == '1' then
  vt_namespace(KEYS[last_key - 1], KEYS[last_key])
  last_key = last_key - 2
end
if ARGV[1] ~= '' then epoch_key = KEYS[last_key] end
local soft_changed = false
local ready, epoch_names_redis = vt_epoch(epoch_key, ARGV[1])
if ready == 'lost' then
  if ARGV[7] ~= '1' then return { VT_BATCH_EPOCH_CHANGED } end
  -- Checks alone (the heartbeat's): each key compares the Redis that took its bookings instead, as
  -- under no epoch, and finds its own loss; the heartbeat then finds the epoch's (the reply says
  -- the epoch was not in place: VT_BATCH_DONE_UNDER_CHANGED_EPOCH).
  ready, epoch_names_redis, epoch_key = 0, false, nil
  soft_changed = true
end

local tag, channel = ARGV[2], ARGV[3]
local sets = {}
local i = 2
for n = 1, A[1] do
  local rule_count = tonumber(A[i + 3])
  local set = { max_hold = tonumber(A[i]), retain = tonumber(A[i + 1]), reserved = A[i + 2] >= 0, grace = A[i + 2], rule_count = rule_count, config_count = rule_count, rules_at = i + 4, most = 0, most_exact = 0, bucketed = false, meta_fields = { unpack(VT_META_FIELDS) }, groups = {}, limits = {}, windows = {}, buckets = {} }
  local by_prefix = {}
  local longest = 1
  local exact_least = math.huge
  for r = 0, rule_count - 1 do
    local limit = tonumber(A[i + 4 + 3 * r])
    local window = tonumber(A[i + 5 + 3 * r])
    -- Parsed once per batch: every decision of the set reads them.
    set.limits[r], set.windows[r], set.buckets[r] = limit, window, tonumber(A[i + 6 + 3 * r])
    set.most = math.max(set.most, limit)
    longest = math.max(longest, window)
    if A[i + 6 + 3 * r] ~= 0 then
      -- A bucketed rule's (WINDOW, BUCKET): meta's count of calls in its buckets is read with the state.
      set.bucketed = true
      local prefix = 'b:' .. tonumber(A[i + 5 + 3 * r]) .. ':' .. tonumber(A[i + 6 + 3 * r]) .. ':'
      local group = by_prefix[prefix]
      if group == nil then
        group = { rules = {}, least = math.huge }
        by_prefix[prefix] = group
        set.groups[#set.groups + 1] = group
        set.meta_fields[#set.meta_fields + 1] = prefix .. 'n'
      end
      group.rules[#group.rules + 1] = r
      group.least = math.min(group.least, limit)
    else
      set.most_exact = math.max(set.most_exact, limit)
      exact_least = math.min(exact_least, limit)
    end
  end
  -- A key that may fold reads its meta `f` with its state (a fold never lowers it).
  if set.bucketed then
    set.meta_fields[#set.meta_fields + 1] = 'f'
    set.f_at = #set.meta_fields
  end
  -- The history kept (RETAIN, k longest windows) and the slots booked ahead (a window at most) hold
  -- at most (k + 1) × the largest limit: 32 more, and the log is trimmed.
  set.trim_above = set.most * (math.ceil(set.retain / longest) + 1) + 32
  -- The log's size up to which calls of one slot each start now with no rule read (decide.lua,
  -- vt_decide_now): below every limit, and below the size that folds a bucketed set.
  set.room = math.huge
  for r = 0, rule_count - 1 do set.room = math.min(set.room, set.limits[r]) end
  if set.bucketed then
    set.room = math.min(set.room, 2 * set.most_exact + 33)
    -- While buckets may count (the mark's `b` ahead), the same decision reads the key's counts in
    -- its buckets (their `n` fields, with no other field of meta) and starts the call now when the
    -- log is below every exact limit and the fold's size, and each bucketed rule has room for it
    -- with its buckets (size + n < its least limit: no fold due, no bucket read, vt_fold_due).
    set.room_exact = math.min(exact_least, 2 * set.most_exact + 33)
    set.n_fields = {}
    for g = 1, #set.groups do set.n_fields[g] = set.meta_fields[#VT_META_FIELDS + g] end
  end
  sets[n] = set
  i = i + 4 + 3 * rule_count
end

local now = nil
local out = { soft_changed and VT_BATCH_DONE_UNDER_CHANGED_EPOCH or VT_BATCH_DONE, 0 }
local last = #A
-- Keys whose check failed (by K), and the checks' answers. ENV: what a key's check or decision needs
-- besides its own arguments: the grace period, and the replication id each key records and compares
-- (meta `r`) where the epoch cannot tell a failover: a batch without it (a Cluster script cannot
-- reach it), or an epoch that names no Redis (written by an earlier version), recovery on
-- (GRACE > 0). Read with the clock.
local lost = {}
local checks = {}
local pauses = {}
local witnesses = {}
local witness_checks = {}
local env = { grace = tonumber(ARGV[4]), replid = '', marked = math.huge, bucketed = math.huge }
local per_key_replid = not epoch_names_redis and env.grace > 0
-- The namespace's mark, read once (a standalone Redis; math.huge elsewhere: meta is always read).
local marked_read = VT_MARK == nil
local function vt_marked()
  if not marked_read then
    marked_read = true
    -- A missing mark (a namespace whose epoch an earlier version made): every key's meta is read.
    local mark = redis.call('HMGET', VT_MARK, 'm', 'b')
    env.marked, env.bucketed = tonumber(mark[1]) or math.huge, tonumber(mark[2]) or math.huge
  end
  return env.marked
end
-- A key found lost (K): no decision on it is made, it is held, and the namespace's epoch ends.
local function vt_lost(k)
  lost[k] = true
  -- A key lost on a standalone Redis (evicted, most likely in a storm that takes others too):
  -- the namespace's epoch ends with it, so that every process puts back all its calls under one
  -- grace period before anything new is decided, whether or not a hold on this key survives.
  if epoch_key ~= nil then redis.call('DEL', epoch_key) end
end
-- A VT_STATUS_NOT_MADE answer per call: a decision on a key that lost its data is not made.
local function vt_not_made(calls)
  for c = 1, calls do
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = VT_STATUS_NOT_MADE, 0, 0, 0, 0
  end
end
-- The clock, read once for the batch, and what it fixes for every decision of each rule set: its
-- score for a call that starts now (as a whole number, passed to ZADD as text: Redis would format a
-- Lua number with %.17g for every call), and whether its calls of one slot may take the flat
-- decision (decide.lua, vt_decide_now): nothing to read in meta (the mark behind, no bucket that
-- counts, no Redis to compare) and the epoch ready.
-- The mark as the batch's operations so far left it: read once, and raised since (VT_MARK_RAISED).
local raises_seen = 0
local function vt_open()
  raises_seen = VT_MARK_RAISED.count
  env.marked = math.max(env.marked, VT_MARK_RAISED.m)
  env.bucketed = math.max(env.bucketed, VT_MARK_RAISED.b)
  local cut = math.floor(now)
  local open = ready <= math.ceil(now) and env.marked < cut and env.replid == ''
  for _, set in ipairs(sets) do
    set.flat = open and (env.bucketed < cut or not set.bucketed)
    set.flat_buckets = open and not set.flat
  end
end
local function vt_clock()
  now = vt_now()
  local now_ms = math.ceil(now)
  out[2] = now_ms
  if per_key_replid then env.replid = vt_replid() end
  vt_marked()
  for _, set in ipairs(sets) do
    set.score = now_ms + set.max_hold
    set.score_arg = set.score
    if set.score == math.floor(set.score) then set.score_arg = string.format('%d', set.score) end
  end
  vt_open()
end
while i <= last do
  local op = A[i]
  local k = A[i + 1]
  -- Completions and leaves come first in a batch and need no clock: TIME only when another operation needs it.
  if now == nil and op ~= VT_OP_COMPLETE and op ~= VT_OP_LEAVE and op ~= VT_OP_PAUSED then vt_clock() end
  -- An earlier operation raised the mark (folded a key's calls into buckets, set a wait or a hold):
  -- the decisions from here on see it.
  if VT_MARK_RAISED.count ~= raises_seen and now ~= nil then vt_open() end
  local set = op == VT_OP_DECIDE and sets[A[i + 2]]
  if set and (set.flat or set.flat_buckets) and A[i + 3] == 1 and A[i + 5] == 1 and not lost[k] then
    -- The usual decision, inline: one call of one slot (COST 1, COUNT 1), booked now if the log has
    -- room (vt_decide_now, whose count == 1 case this is), else decided by vt_decide on the size read.
    local log = KEYS[2 * k - 1]
    local size = redis.call('ZCARD', log)
    local w = witnesses[k]
    witnesses[k] = nil
    local room = size < set.room
    if set.flat_buckets then
      room = size < set.room_exact
      if room then
        local counts = redis.call('HMGET', KEYS[2 * k], unpack(set.n_fields))
        for g, group in ipairs(set.groups) do
          if size + tonumber(counts[g] or 0) >= group.least then room = false end
        end
      end
    end
    if room then
      local member = A[i + 7] .. tag
      local added
      local confirmed = false
      local deadline = 0
      if w ~= nil then deadline = A[w + 3] end
      -- A witness that no longer counts proves nothing.
      if w ~= nil and now < A[w + 2] then
        local wscore = A[w + 1]
        added = redis.call('ZADD', log, 'NX', set.score_arg, member, wscore, A[w] .. tag)
        if added <= 1 then
          confirmed = true
        elseif vt_witness_lost(KEYS[2 * k], wscore) then
          redis.call('ZREM', log, member)
          vt_not_made(1)
          -- The witness put back (a slot of this process's) may have made the key anew: it lives as the slot counts.
          vt_keep(log, tonumber(wscore) + set.retain - now, now)
          vt_hold(log, KEYS[2 * k], now, env.grace)
          vt_lost(k)
          checks[witness_checks[k]] = VT_CHECK_LOST
          added = nil
        else
          -- Gone into the buckets by a fold: not a loss, and no longer this process's to keep there.
          redis.call('ZREM', log, A[w] .. tag)
        end
      else
        added = redis.call('ZADD', log, set.score_arg, member)
      end
      if added ~= nil then
        out[#out + 1] = VT_STATUS_BOOKED_NOW
        -- The log's life (vt_log_life), set only where it may have to: it does nothing otherwise.
        if size == 0 or VT_KEPT ~= nil or not confirmed or set.score + set.retain > deadline then
          vt_log_life(log, set.score, set.retain, size == 0, confirmed, deadline, now)
        end
      end
      i = i + 8
    else
      local found_lost
      i, found_lost = vt_decide(log, KEYS[2 * k], now, ready, tag, channel, set, A, i + 3, out, env, w, size)
      if found_lost then
        vt_hold(log, KEYS[2 * k], now, env.grace)
        vt_lost(k)
        checks[witness_checks[k]] = VT_CHECK_LOST
      end
    end
  elseif op == VT_OP_COMPLETE and A[i + 2] == 1 then
    -- The usual completion, inline: one call of the key (vt_complete writes those of several).
    local log = KEYS[2 * k - 1]
    local release = A[i + 4]
    local latest = 0
    if release == -1 then
      redis.call('ZREM', log, A[i + 3] .. tag)
    else
      redis.call('ZADD', log, 'XX', 'LT', release, A[i + 3] .. tag)
      latest = tonumber(release)
    end
    if (marked_read and env.marked or vt_marked()) >= latest then
      local value = redis.call('HGET', KEYS[2 * k], 'w')
      if value then vt_waiters_wake(vt_waiters_parse(value), channel, vt_user_key(log), latest) end
    end
    i = i + 5
  elseif op == VT_OP_DECIDE then
    if lost[k] then
      local count = tonumber(A[i + 5])
      vt_not_made(count)
      i = i + 6 + 2 * count
    else
      local found_lost
      local witness = witnesses[k]
      i, found_lost = vt_decide(KEYS[2 * k - 1], KEYS[2 * k], now, ready, tag, channel, set, A, i + 3, out, env, witness)
      witnesses[k] = nil
      if found_lost then
        vt_hold(KEYS[2 * k - 1], KEYS[2 * k], now, env.grace)
        vt_lost(k)
        checks[witness_checks[k]] = VT_CHECK_LOST
      end
    end
  elseif op == VT_OP_DECIDE_KEYS then
    local n = k
    local whole = true
    for e = 0, n - 1 do
      if lost[tonumber(A[i + 2 + 2 * e])] then whole = false end
    end
    local at = i + 2 + 2 * n
    if whole then
      local keys = {}
      local cut = math.floor(now)
      for e = 0, n - 1 do
        local kk = tonumber(A[i + 2 + 2 * e])
        keys[e + 1] = vt_key_open(KEYS[2 * kk - 1], KEYS[2 * kk], sets[tonumber(A[i + 3 + 2 * e])], cut, now, env)
      end
      vt_decide_keys(keys, now, ready, tag, channel, tonumber(A[at]), A[at + 1], A[at + 2], A, out)
    else
      vt_not_made(1)
    end
    i = at + 3
  elseif op == VT_OP_COMPLETE then
    i = vt_complete(KEYS[2 * k - 1], KEYS[2 * k], tag, channel, A, i + 2, vt_marked())
  elseif op == VT_OP_LEAVE then
    vt_leave(KEYS[2 * k - 1], KEYS[2 * k], tag, channel)
    i = i + 2
  elseif op == VT_OP_CHECK or op == VT_OP_CHECK_FULL then
    local status
    -- Meta is looked at only where it may hold a hold (the mark lies ahead) or names a Redis.
    local full = op == VT_OP_CHECK_FULL and (env.marked >= math.floor(now) or env.replid ~= '')
    status, i = vt_check(KEYS[2 * k - 1], KEYS[2 * k], tag, now, env.grace, env.replid, A, i + 2, full)
    if status == VT_CHECK_LOST then vt_lost(k) end
    checks[#checks + 1] = status
  elseif op == VT_OP_WITNESS then
    checks[#checks + 1] = VT_CHECK_WHOLE
    -- Where its fields are in A (read by the key's decision), and its check's answer.
    witnesses[k], witness_checks[k] = i + 2, #checks
    i = i + 6
  elseif op == VT_OP_PAUSED then
    pauses[#pauses + 1] = tonumber(redis.call('HGET', KEYS[2 * k], 'pause') or 0)
    i = i + 2
  elseif op == VT_OP_TIDY then
    vt_tidy(KEYS[2 * k - 1], KEYS[2 * k], tag, now, tonumber(A[i + 2]))
    i = i + 3
  else
    return redis.error_reply('vtBatch: unknown operation ' .. tostring(A[i]))
  end
end
local n = #out
for c = 1, #checks do out[n + c] = checks[c] end
for _, pause in ipairs(pauses) do out[#out + 1] = pause end
if ARGV[8] == '1' then
  local info = redis.pcall('INFO', 'stats')
  out[#out + 1] = type(info) == 'string' and tonumber(string.match(info, 'evicted_keys:(%d+)')) or -1
end
if alive_key ~= nil then
  local at, n, keep_ms = now or vt_now(), tonumber(ARGV[9]), tonumber(ARGV[11])
  out[#out + 1] = n >= 0 and vt_stamp(alive_key, tag, n, tonumber(ARGV[10]), keep_ms, ARGV[12] == '1', at) or -1
  if ARGV[13] == '1' then vt_alive_read(alive_key, keep_ms, at, out) end
end
if VT_KEPT ~= nil then
  local at = now or vt_now()
  for k = 1, last_key - (epoch_key and 1 or 0) do vt_take_in(KEYS[k], at) end
  vt_sweep(at, last_key)
end
return out
