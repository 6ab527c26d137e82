--[[
  decide: COUNT calls in a row for one key, each asking to start COST slots as early as every rule
  allows. Needs the "log" and "buckets" includes. See docs/design.md for the proof.

  For each rule {LIMIT, WINDOW}, with the log's scores sorted ascending x[0] <= ... <= x[size-1],
  COST more slots fit at t when at most LIMIT - COST scores exceed t - WINDOW: when the binding
  score b = x[size - LIMIT + COST - 1] (if any) has b + WINDOW <= t. So:
  - no rule binds at now: the call starts now;
  - every binding score is known (b <= now): book the slot at t = max(b + WINDOW) and answer the
    wait (the caller sleeps until then: one round trip, no polling);
  - some binding score is still a bound (its call in flight, or booked ahead): book nothing, set
    this process in the key's list of waiting processes (includes/waiters.lua), and answer
    'deferred' with the bound: the next completion (complete.lua) wakes the first waiting process
    (they take turns), which asks again then, or at the bound at the latest.

  SET      the call's rule set (lua/batch.lua): MAX_HOLD (ms after its start a call may still
           reach the vendor: a booked slot's score is START + MAX_HOLD until its completion lowers
           it), RETAIN (ms of history to keep, at least the longest window), the rules {LIMIT,
           WINDOW, BUCKET (ms, 0 = exact)} at RULES_AT in A
  A[I ..]  COST      slots per call (1 .. smallest limit)
           STAY      1: this process still waits on the key through other calls (a call of several
                     keys), so a decision that waits no more leaves it in the key's list of waiting
                     processes; 0: it leaves the list once it waits no more
           COUNT     calls, followed by COUNT pairs: MAX_DELAY (ms, -1 = any), FIRST (the number
                     of the call's first member; members are FIRST .. FIRST+COST-1, each followed by TAG)
  A call of several keys is decided by vt_decide_keys (below): one call, every key's rules.

  Appends to OUT, per call, five values: status, wait_ms, start_at, rule_index, retry_ms; or, for
  a call booked to start at once (the usual answer), the one value VT_STATUS_BOOKED_NOW (wait 0,
  start at NOW_MS, no rule, no retry: the other four are known); or, for a reservation booked with
  dependencies (vt_deps), VT_STATUS_BOOKED_DEPS, the four, and the dependencies.
  status: VT_STATUS_BOOKED (start in wait_ms), VT_STATUS_REFUSED (wait_ms: no slot before then),
  VT_STATUS_DEFERRED (ask again after a completion on the key, or in retry_ms at the latest; no
  slot before wait_ms).
  rule_index: 0-based index of the rule that set the start, VT_RULE_PAUSED a vendor pause,
  VT_RULE_NONE neither, VT_RULE_RECOVERING a new epoch is not ready yet, or the key is held after
  a loss (meta `h`, includes/check.lua): live processes are putting back their calls.
]]
-- Whether the log's old completed calls are folded into buckets before the next call of COST: when
-- the log holds more than twice the exact rules' largest limit plus 32 (memory stays bounded), or
-- when some bucketed rule could bind (its log and buckets together leave no room for COST more:
-- the rule then reads its buckets). Until then each call counts by its own release, exactly.
local function vt_fold_due(size, folded, set, cost)
  if size > 2 * set.most_exact + 32 then return true end
  for r, n in pairs(folded) do
    if size + n > set.limits[r] - cost then return true end
  end
  return false
end

-- A key's state as a decision reads it: meta's fields in this order (lua/batch.lua's
-- meta_fields), then the bucket counts of a bucketed rule set, then `f`.
local VT_STATE_PAUSE, VT_STATE_WAITING, VT_STATE_HOLD, VT_STATE_REPLID, VT_STATE_LEARNED = 1, 2, 3, 4, 5
local VT_META_FIELDS = { 'pause', 'w', 'h', 'r', 'l' }

-- An empty table, never written: the buckets of a rule set without bucketed rules, or the bounds
-- of a call that none binds.
local vt_none = {}

-- One key of a decision: its state, read once per operation. meta is read only where it may hold
-- something a decision needs: while the namespace's mark lies ahead (env.marked: a pause, a hold or
-- a waiting list may be set; env.bucketed, for a bucketed rule set: buckets may count; math.huge
-- where there is no mark), or where each key names its Redis (env.replid). Trims the log when it holds 32 more than
-- the history kept and the bookings ahead can count (entries older than the history sit below
-- every index a rule looks at: trimming them only bounds memory). A key that failed over since its
-- last booking is held (vt_failed_over, includes/log.lua). WITNESS: this process's newest slot on
-- the key, checked by the first booking (vt_key_book), or nil. SIZE: the log's size if already read.
local function vt_key_open(log, meta, set, cut, now, env, witness, size)
  -- The life this process last gave the log (0: unknown), and its witness: one that no longer counts proves nothing.
  local deadline = witness and witness.deadline or 0
  if witness ~= nil and now >= witness.until_ms then witness = nil end
  local state = vt_none
  if env.marked >= cut or (set.bucketed and env.bucketed >= cut) or env.replid ~= '' then state = redis.call('HMGET', meta, unpack(set.meta_fields)) end
  if vt_failed_over(log, meta, state[VT_STATE_REPLID], env.replid, now, env.grace) then
    state[VT_STATE_HOLD] = math.max(tonumber(state[VT_STATE_HOLD] or 0), math.ceil(now + env.grace))
    state[VT_STATE_REPLID] = env.replid
  end
  -- Limits learned from the vendor (includes/learned.lua): this key's own rule set, the tighter.
  if state[VT_STATE_LEARNED] then set = vt_learned_set(set, state[VT_STATE_LEARNED], now) end
  local key = { log = log, meta = meta, set = set, state = state, replid = env.replid, pause = tonumber(state[VT_STATE_PAUSE] or 0), hold = tonumber(state[VT_STATE_HOLD] or 0), folded = vt_none, unfolded = set.bucketed, booked_until = 0, waits_until = 0, fresh = false, witness = witness, confirmed = false, deadline = deadline }
  -- Calls in the buckets of each bucketed rule: meta's count as of the last fold, never fewer than
  -- those still counting (buckets change only when calls are folded).
  if set.bucketed then
    key.folded = {}
    key.buckets = {}
  else
    key.buckets = vt_none
  end
  for g, group in ipairs(set.groups) do
    for _, r in ipairs(group.rules) do key.folded[r] = tonumber(state[#VT_META_FIELDS + g] or 0) end
  end
  size = size or redis.call('ZCARD', log)
  if size > set.trim_above then
    size = size - redis.call('ZREMRANGEBYSCORE', log, '-inf', cut - set.retain)
  end
  key.size = size
  return key
end

-- Applies KEY's rules to a call of COST (its pause, and every key's, already in START_AT): known
-- binding scores move START_AT (RULE_INDEX: the rule that set it, counted from OFFSET); binding
-- scores still in flight (bounds) go to PENDING as { score, window, rule index, KEY }, checked once
-- every key has moved the start. Folds first when due.
local function vt_key_rules(key, cost, now, now_ms, cut, a, start_at, rule_index, pending, offset)
  local set = key.set
  if key.unfolded and vt_fold_due(key.size, key.folded, set, cost) then
    local folded_until, removed
    folded_until, key.folded, removed = vt_fold(key.log, key.meta, a, set.rules_at, set.config_count, cut, tonumber(key.state[set.f_at] or 0), set.learned_horizon)
    -- Buckets count until their end plus the window: meta lives at least that long.
    if folded_until > 0 then vt_keep(key.meta, folded_until - now, now) end
    key.size = key.size - removed
    key.unfolded = false
  end
  local size, folded, buckets = key.size, key.folded, key.buckets
  for r = 0, set.rule_count - 1 do
    -- A call of COST never waits for more room than a rule has (a learned limit below COST).
    local limit = math.max(set.limits[r], cost)
    local window = set.windows[r]
    local index = offset + r
    if r >= set.config_count then index = VT_RULE_LEARNED end
    local score = nil
    local free_at = nil
    local at, member = nil, nil
    if folded[r] ~= nil then
      -- Buckets are read only once the log and the buckets together could fill the rule.
      if buckets[r] == nil and size + folded[r] > limit - cost then
        buckets[r] = vt_buckets(key.meta, window, set.buckets[r], cut)
      end
      if buckets[r] ~= nil then
        local entry
        free_at, entry = vt_bucketed_free_at(key.log, size, buckets[r], limit, window, cost, now)
        if entry ~= nil then score = tonumber(entry[2]) end
      end
    else
      at = size - limit + cost - 1
      if at >= 0 then
        local entry = redis.call('ZRANGE', key.log, at, at, 'WITHSCORES')
        score, member = tonumber(entry[2]), entry[1]
        free_at = score + window
      end
    end
    if score ~= nil and score > now_ms then
      pending = pending or {}
      -- AT and MEMBER: the binding score's place in the log and its slot, for a reservation (vt_bounds, vt_deps); nil for a bucketed rule.
      pending[#pending + 1] = { score, window, index, key, at, member }
    elseif free_at ~= nil and free_at > start_at then
      start_at = free_at
      rule_index = index
    end
  end
  return start_at, rule_index, pending
end

-- Where a reservation takes the binding slot of pending entry P to release at the soonest: its
-- start, its score - MAX_HOLD for a reservation's slot (MAX_HOLD holds its grace), else its score -
-- (MAX_HOLD - GRACE), a call's. Slots of both kinds at that score: a call's (the later).
local function vt_reserved_hold(p, max_hold, grace)
  if (tonumber(string.match(p[6], '^%d+')) or 0) < VT_CLAIM_RESERVED then return max_hold - grace end
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', p[4].log, p[1], p[1])) do
    if (tonumber(string.match(member, '^%d+')) or 0) < VT_CLAIM_RESERVED then return max_hold - grace end
  end
  return max_hold
end

-- A bound binds if its window still reaches past the start; the earliest such bound is when the
-- caller asks again at the latest (by then that score is known). Its call released at the soonest
-- when it started (bound - MAX_HOLD) or now: no slot before that plus its window. Each key with a
-- binding bound waits until its earliest one (waits_until, when the call is deferred).
--
-- RESERVED (a reservation's set, SET.grace its grace): no bound binds; the call is booked at that
-- soonest start (vt_reserved_hold), and the slots it counted released by then are its dependencies
-- (vt_deps), which its claim checks. A bucketed rule's bound (a fold could take a dependency out
-- of the log before its window passed) counts released at its score instead, a start the slot
-- keeps whatever that call does.
local function vt_bounds(pending, start_at, now_ms, set, rule_index)
  local bound = nil
  local earliest = start_at
  local reserved = set.reserved
  for _, p in ipairs(pending or vt_none) do
    if p[1] + p[2] > start_at then
      local soonest
      if not reserved then
        soonest = math.max(now_ms, p[1] - set.max_hold) + p[2]
        if bound == nil or p[1] < bound then bound = p[1] end
        local key = p[4]
        if key.binds == nil or p[1] < key.binds then key.binds = p[1] end
      elseif p[5] == nil then
        soonest = p[1] + p[2]
      else
        soonest = math.max(now_ms, p[1] - vt_reserved_hold(p, set.max_hold, set.grace)) + p[2]
      end
      if soonest > earliest then
        earliest = soonest
        rule_index = p[3]
      end
    end
  end
  return bound, earliest, rule_index
end

-- A reservation's dependencies at START: for each exact rule whose binding score was still a bound,
-- the slots at or below it (log index AT) that count at START unless released by then: the
-- reservation took them to release at their start (or now). Its claim starts only once each has
-- released a window before (lua/claim.lua). Returns them as "MEMBER WINDOW ...", the window
-- followed by "@PART" for a slot of a key after the first of a call of several keys (key.part; the
-- ordered list the reservation's members carry the hash of), or nil when none, or false when more than
-- VT_RESERVE_MOST_DEPS (then the reservation counts them released at their bounds: vt_bounds_sure).
local function vt_deps(pending, start)
  local parts = nil
  local count = 0
  for _, p in ipairs(pending or vt_none) do
    if p[5] ~= nil and p[1] + p[2] > start then
      local below = redis.call('ZCOUNT', p[4].log, '-inf', start - p[2])
      if below <= p[5] then
        count = count + p[5] - below + 1
        if count > VT_RESERVE_MOST_DEPS then return false end
        local entries = redis.call('ZRANGE', p[4].log, below, p[5])
        parts = parts or {}
        local window = string.format('%d', p[2])
        if (p[4].part or 0) > 0 then window = window .. '@' .. p[4].part end
        for _, member in ipairs(entries) do
          parts[#parts + 1] = member
          parts[#parts + 1] = window
        end
      end
    end
  end
  return parts and table.concat(parts, ' ')
end

-- A reservation with too many dependencies: every binding bound counts released at its score.
local function vt_bounds_sure(pending, start_at, rule_index)
  for _, p in ipairs(pending or vt_none) do
    if p[1] + p[2] > start_at then
      start_at = p[1] + p[2]
      rule_index = p[3]
    end
  end
  return start_at, rule_index
end

-- Where a call starts once the binding scores still in flight are weighed (vt_bounds): START_AT,
-- EARLIEST (no slot before), BOUND (the earliest binding bound, for a call that waits for a
-- completion) and RULE_INDEX; for a reservation (SET.reserved), its start and its dependencies
-- (vt_deps), or, with too many of them, the start their bounds allow (vt_bounds_sure).
local function vt_start(pending, start_at, now_ms, set, rule_index)
  local bound, earliest, deps
  bound, earliest, rule_index = vt_bounds(pending, start_at, now_ms, set, rule_index)
  if set.reserved and pending ~= nil then
    deps = vt_deps(pending, math.ceil(earliest))
    if deps == false then
      deps = nil
      earliest, rule_index = vt_bounds_sure(pending, start_at, rule_index)
    end
    start_at = earliest
  end
  return start_at, earliest, bound, rule_index, deps
end

-- What a reservation's members' names end with: '~' and 16 hex digits of the SHA-1 of its
-- dependencies' list, followed for a reservation of several KEYS by '|' and their user keys in
-- order (lib/slot-plan.ts, depsSuffix); nil without dependencies.
local function vt_deps_suffix(deps, keys)
  if not deps then return nil end
  if keys and #keys > 1 then
    local names = {}
    for e, key in ipairs(keys) do names[e] = vt_user_key(key.log) end
    deps = deps .. '|' .. table.concat(names, ' ')
  end
  return '~' .. string.sub(redis.sha1hex(deps), 1, 16)
end

-- Appends the answer to one call to OUT: status, wait_ms, start_at, rule_index, retry_ms, or
-- VT_STATUS_BOOKED_NOW alone (see the header). Returns its status, whether to book it, whether it
-- waits for a completion (deferred by a bound), and its start (ms, rounded up).
local function vt_answer(out, now, now_ms, ready, max_delay, start_at, earliest, bound, rule_index, deps)
  local wait = 0
  if earliest > now then wait = math.ceil(earliest - now) end
  start_at = math.ceil(start_at)
  local limited = max_delay >= 0 and wait > max_delay
  local status, retry, book, waits = VT_STATUS_BOOKED, 0, true, false
  if ready > now_ms then
    local until_ready = math.ceil(ready - now)
    book, rule_index = false, VT_RULE_RECOVERING
    if max_delay >= 0 and until_ready > max_delay then
      status, wait = VT_STATUS_REFUSED, math.max(until_ready, wait)
    else
      status, wait, retry = VT_STATUS_DEFERRED, until_ready, until_ready
    end
  elseif bound ~= nil and (limited or max_delay == 0) then
    -- Cannot wait for the completion: refused, with the soonest a slot could be free.
    status, book = VT_STATUS_REFUSED, false
  elseif bound ~= nil then
    status, book, waits, retry = VT_STATUS_DEFERRED, false, true, math.max(1, math.ceil(bound - now))
  elseif limited then
    status, book = VT_STATUS_REFUSED, false
  end
  local n = #out
  if book and deps ~= nil then
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = VT_STATUS_BOOKED_DEPS, wait, start_at, rule_index, retry, deps
  elseif book and wait == 0 and rule_index == VT_RULE_NONE and start_at == now_ms then
    out[n + 1] = VT_STATUS_BOOKED_NOW
  else
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = status, wait, start_at, rule_index, retry
  end
  return status, book, waits, start_at
end

-- Books COST slots at SCORE in KEY: members FIRST .. FIRST+COST-1 followed by TAG (FIRST as sent
-- when COST is 1, the usual call), and by SUFFIX where given (a reservation's: the hash of its
-- dependencies, vt_deps). The first booking on a key with a witness checks it: a call of
-- one slot adds the witness with it (ZADD NX, no command of its own: it adds 2 where the witness was
-- gone), a larger one looks it up first. Returns false, booking nothing, when the key lost its data
-- (the witness gone while it counts, and no fold took it): the caller puts back its calls.
local function vt_key_book(key, score, cost, first, tag, now, suffix)
  -- A booking into an empty log (new, or emptied by a trim or a fold) creates the key: it has no
  -- time to live yet, which PEXPIRE GT would not set.
  if key.size == 0 then key.fresh = true end
  local witness = key.witness
  local own = tag
  if suffix then tag = tag .. suffix end
  if witness ~= nil then
    key.witness = nil
    local member = witness.number .. own
    local gone
    if cost == 1 then
      gone = redis.call('ZADD', key.log, 'NX', score, first .. tag, witness.score, member) == 2
    else
      gone = not redis.call('ZSCORE', key.log, member)
    end
    if gone and vt_witness_lost(key.meta, witness.score) then
      if cost == 1 then
        redis.call('ZREM', key.log, first .. tag)
        -- The witness put back (a slot of this process's) may have made the key anew: it lives as the slot counts.
        vt_keep(key.log, witness.score + key.set.retain - now, now)
      end
      return false
    end
    if gone and cost == 1 then redis.call('ZREM', key.log, member) end
    key.confirmed = not gone
    if cost == 1 then
      key.size = key.size + 1
      key.booked_until = math.max(key.booked_until, score)
      return true
    end
  end
  if cost == 1 then
    redis.call('ZADD', key.log, score, first .. tag)
  else
    first = tonumber(first)
    -- In chunks: unpack() takes a few thousand values at most, and cost may be as large as a limit.
    for from = 0, cost - 1, 1000 do
      local args = {}
      for k = from, math.min(cost, from + 1000) - 1 do
        args[#args + 1] = score
        args[#args + 1] = string.format('%d', first + k) .. tag
      end
      redis.call('ZADD', key.log, unpack(args))
    end
  end
  key.size = key.size + cost
  key.booked_until = math.max(key.booked_until, score)
  return true
end

-- The slack a key's lifetime is given beyond what its latest booking needs, so that the next
-- bookings of the same process need not set it again (lib/journal.ts computes the same).
local function vt_expiry_slack(retain)
  return math.min(math.max(retain, VT_EXPIRY_SLACK_MIN_MS), VT_EXPIRY_SLACK_MAX_MS)
end

-- Gives LOG the life a booking up to BOOKED_UNTIL needs: that plus RETAIN and a slack, never less
-- than DEADLINE, the life this process believes the log has (lib/journal.ts), which it
-- keeps until it finds its witness gone. A log just made (FRESH) has no life yet; another gets more
-- only when it must grow (PEXPIRE GT never shortens what an earlier booking ahead set): not when
-- this process's witness was there (CONFIRMED: no loss since it set DEADLINE, which nothing
-- shortens while its slots count, vt_tidy) and DEADLINE covers the need. Returns the ttl asked.
local function vt_log_life(log, booked_until, retain, fresh, confirmed, deadline, now)
  local need = booked_until + retain
  local ttl = math.ceil(need + vt_expiry_slack(retain) - now)
  if fresh then
    vt_expire(log, math.max(ttl, deadline - now), now)
  elseif VT_KEPT ~= nil or not confirmed or need > deadline then
    vt_expire(log, math.max(ttl, deadline - now), now, 'GT')
  end
  return ttl
end

-- After the operation: the log's life (vt_log_life). This process is in the key's list of
-- waiting processes until WAITS_UNTIL, or out of it (0) unless STAY (its other calls still wait on
-- the key: a call of several keys, or one of this key beside them).
local function vt_key_close(key, now, now_ms, tag, channel, stay)
  if key.booked_until > 0 then
    local ttl = vt_log_life(key.log, key.booked_until, key.set.retain, key.fresh, key.confirmed, key.deadline, now)
    -- Which Redis took the booking: written when it changes (a new key, a failover, meta expired).
    if key.replid ~= '' and key.state[VT_STATE_REPLID] ~= key.replid then
      redis.call('HSET', key.meta, 'r', key.replid)
      -- Usually a meta just created (a new key): it has no time to live yet.
      if vt_expire(key.meta, ttl, now, 'NX') == 0 then vt_keep(key.meta, ttl, now) end
    end
  end
  local waiting = key.state[VT_STATE_WAITING]
  if key.waits_until > 0 or (waiting and not stay) then
    vt_waiters_update(key.meta, waiting, tag, key.waits_until, now_ms, channel, vt_user_key(key.log), key.booked_until > 0)
  elseif waiting then
    -- STAY, and this decision waits no more on the key: the process takes its turn again after the
    -- others (its other calls may still wait), whether it was served or not (a wake it could not use
    -- then goes to the next process with the next completion, not to it again).
    vt_waiters_update(key.meta, waiting, tag, -1, now_ms, channel, vt_user_key(key.log), true)
  end
end

-- The usual decision, flat: COUNT calls of one slot each on a key whose meta holds nothing to read
-- (the namespace's mark lies behind: no pause, hold or waiting list; no buckets that count; no
-- replication id to compare) and whose log leaves room for all of them under every rule (SIZE +
-- COUNT <= set.room: no binding score, no fold due). Each call starts now: booked at once, in one
-- ZADD that also carries the witness (ZADD NX: 2 more added than booked when it was gone). The same
-- answers, bookings and lifetime as the general path below gives in that case, without its tables.
-- SET's score and score_arg: the batch's booking score for a call that starts now (lua/batch.lua).
-- Returns whether the key was found to have lost its data.
local function vt_decide_now(log, meta, now, tag, set, a, calls_at, count, size, out, wnumber, wscore, deadline)
  local score = set.score
  local added
  if count == 1 then
    -- One call (the usual decision): no table for the ZADD's arguments.
    if wnumber ~= nil then
      added = redis.call('ZADD', log, 'NX', set.score_arg, a[calls_at + 1] .. tag, wscore, wnumber .. tag)
    else
      added = redis.call('ZADD', log, set.score_arg, a[calls_at + 1] .. tag)
    end
  else
    local args = { 'NX' }
    for c = 0, count - 1 do
      args[2 * c + 2] = set.score_arg
      args[2 * c + 3] = a[calls_at + 2 * c + 1] .. tag
    end
    if wnumber ~= nil then
      args[2 * count + 2] = wscore
      args[2 * count + 3] = wnumber .. tag
    end
    added = redis.call('ZADD', log, unpack(args))
  end
  local confirmed = false
  if wnumber ~= nil then
    if added > count then
      if vt_witness_lost(meta, wscore) then
        for c = 0, count - 1 do
          redis.call('ZREM', log, a[calls_at + 2 * c + 1] .. tag)
          local n = #out
          out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = VT_STATUS_NOT_MADE, 0, 0, 0, 0
        end
        -- The witness put back (a slot of this process's) may have made the key anew: it lives as the slot counts.
        vt_keep(log, tonumber(wscore) + set.retain - now, now)
        return true
      end
      -- Gone into the buckets by a fold: not a loss, and no longer this process's to keep there.
      redis.call('ZREM', log, wnumber .. tag)
    else
      confirmed = true
    end
  end
  local n = #out
  for c = 1, count do out[n + c] = VT_STATUS_BOOKED_NOW end
  vt_log_life(log, score, set.retain, size == 0, confirmed, deadline, now)
  return false
end

-- decide: COUNT calls of one key (see the header). W: where in A this process's newest slot on the
-- key (its witness: NUMBER, SCORE, KEY_UNTIL, DEADLINE, lua/batch.lua) lies, or nil. SIZE: the
-- log's size, when the caller read it and found no room for the flat decision (lua/batch.lua's own
-- flat decision of one call), or nil. Returns the index in A after its arguments, and whether the key was found to have lost
-- its data (its calls from the one that found it on are answered VT_STATUS_NOT_MADE).
local function vt_decide(log, meta, now, ready, tag, channel, set, a, i, out, env, w, size)
  local now_ms = math.ceil(now)
  -- What no longer counts at CUT no longer counts at now (NOW_MS, rounded up, may lie just past a
  -- slot's end that a call starting at the reading itself must still see).
  local cut = math.floor(now)
  local cost = tonumber(a[i])
  local stay = a[i + 1] == 1
  local count = tonumber(a[i + 2])
  local calls_at = i + 3
  local size_read = size
  if size == nil and cost == 1 and ready <= now_ms and env.marked < cut and env.replid == '' and (env.bucketed < cut or not set.bucketed) then
    local size = redis.call('ZCARD', log)
    if size + count <= set.room then
      local wnumber, wscore, deadline = nil, nil, 0
      if w ~= nil then
        deadline = tonumber(a[w + 3])
        -- One that no longer counts proves nothing.
        if now < tonumber(a[w + 2]) then wnumber, wscore = a[w], a[w + 1] end
      end
      return calls_at + 2 * count, vt_decide_now(log, meta, now, tag, set, a, calls_at, count, size, out, wnumber, wscore, deadline)
    end
    size_read = size
  end
  local witness = nil
  if w ~= nil then witness = { number = a[w], score = tonumber(a[w + 1]), until_ms = tonumber(a[w + 2]), deadline = tonumber(a[w + 3]) } end
  local key = vt_key_open(log, meta, set, cut, now, env, witness, size_read)
  local lost = false
  for c = 0, count - 1 do
    -- The clock as read, not rounded up: a slot is free now only if it is free at the moment the
    -- call can start, which is after this reading, never before it.
    local start_at, rule_index = now, VT_RULE_NONE
    if key.pause > now then start_at, rule_index = key.pause, VT_RULE_PAUSED end
    local pending
    start_at, rule_index, pending = vt_key_rules(key, cost, now, now_ms, cut, a, start_at, rule_index, nil, 0)
    local earliest, bound, deps
    start_at, earliest, bound, rule_index, deps = vt_start(pending, start_at, now_ms, set, rule_index)
    local answered = #out
    local status, book, waits, start = vt_answer(out, now, now_ms, math.max(ready, key.hold), a[calls_at + 2 * c], start_at, earliest, bound, rule_index, deps)
    if waits then key.waits_until = math.max(key.waits_until, bound) end
    if book and not vt_key_book(key, start + set.max_hold, cost, a[calls_at + 2 * c + 1], tag, now, vt_deps_suffix(deps)) then
      lost = true
      for v = answered + 1, #out do out[v] = nil end
      for rest = c, count - 1 do
        local n = #out
        out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = VT_STATUS_NOT_MADE, 0, 0, 0, 0
      end
      break
    end
    if status == VT_STATUS_DEFERRED then
      -- The calls after a deferred one meet the same state: the same answer.
      local n = #out
      for rest = 0, count - c - 2 do
        for v = 1, 5 do out[n + 5 * rest + v] = out[n - 5 + v] end
      end
      break
    end
  end
  -- A witness no booking checked (no call was booked): looked up, as the decisions relied on the key.
  if key.witness ~= nil then lost = vt_witness_missing(log, meta, tag, now, key.witness) end
  vt_key_close(key, now, now_ms, tag, channel, stay)
  return calls_at + 2 * count, lost
end

-- decide several keys: one call of COST slots in N keys at once (lua/batch.lua gives each key's
-- log, meta and rule set). It starts only when every rule of every key allows it, as if the rules
-- of all keys were one key's (rule indices count on from key to key), and then books COST slots in
-- each. Deferred: this process waits on each key whose binding call is in flight. It never leaves
-- a key's list here: the calls of several keys share keys with others of the process, which leave
-- it when none waits (a leave operation). A reservation (the first key's set RESERVED) is decided
-- as a reservation of one key (vt_decide), its dependencies in every key (key.part).
local function vt_decide_keys(keys, now, ready, tag, channel, cost, max_delay, first, a, out)
  local now_ms = math.ceil(now)
  local cut = math.floor(now)
  local start_at, rule_index, pending = now, VT_RULE_NONE, nil
  local offset = 0
  local set = keys[1].set
  -- Every key's pause first, then every rule (as one key's pause, then its rules).
  for _, key in ipairs(keys) do
    if key.pause > start_at then start_at, rule_index = key.pause, VT_RULE_PAUSED end
    ready = math.max(ready, key.hold)
  end
  for e, key in ipairs(keys) do
    key.part = e - 1
    start_at, rule_index, pending = vt_key_rules(key, cost, now, now_ms, cut, a, start_at, rule_index, pending, offset)
    offset = offset + key.set.config_count
  end
  local earliest, bound, deps
  start_at, earliest, bound, rule_index, deps = vt_start(pending, start_at, now_ms, set, rule_index)
  local _, book, waits, start = vt_answer(out, now, now_ms, ready, max_delay, start_at, earliest, bound, rule_index, deps)
  local suffix = vt_deps_suffix(deps, keys)
  for _, key in ipairs(keys) do
    if waits and key.binds ~= nil then key.waits_until = key.binds end
    if book then vt_key_book(key, start + set.max_hold, cost, first, tag, now, suffix) end
    vt_key_close(key, now, now_ms, tag, channel, true)
  end
end
