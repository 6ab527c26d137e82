--[[
  restore: puts calls into a key's log that its current contents do not hold: calls a process
  decided locally while the store was down, or, after the store lost its data, the calls each
  process still knows it made (its journal). Never removes anything; an entry already present is
  left as it is.

  KEYS[1]  log     sorted set of slots (see includes/ops.lua)
  KEYS[2]  meta    hash of the key
  KEYS[3]  flight  sorted set of the slots not settled yet
  ARGV[1]  RETAIN    ms of history to keep
  ARGV[2]  MAX_HOLD  ms an unsettled call may stay in flight past its estimate
  ARGV[3]  RELATIVE  1: scores are ms from the store's now; 0: absolute store-clock times (ms)
  ARGV[4]  N, followed by N triples: MEMBER ('' = take a new slot number), SCORE, SETTLED (1|0)
           A settled entry counts until SCORE (its completion); an unsettled one is a call whose
           completion is not known, with SCORE its estimate (start + hold): it goes to the flight
           set too, and bookings after it start no earlier than its estimate.

  Returns the entries added, flat: MEMBER, SCORE (ms, store clock, rounded up), … so that the
  process can journal the slots numbered here.
]]
--- @include "log"

local log, meta, flight = KEYS[1], KEYS[2], KEYS[3]
local retain = tonumber(ARGV[1])
local max_hold = tonumber(ARGV[2])
local relative = ARGV[3] == '1'
local count = tonumber(ARGV[4])
local now = vt_now()
local now_ms = math.ceil(now)

local state = redis.call('HMGET', meta, 'seq', 'last', 'pause')
local seq = tonumber(state[1] or 0)
local last = tonumber(state[2] or 0)
local added = {}
for i = 0, count - 1 do
  local member = ARGV[5 + 3 * i]
  local score = tonumber(ARGV[6 + 3 * i])
  local settled = ARGV[7 + 3 * i] == '1'
  if relative then score = math.ceil(now + score) end
  if member == '' then
    seq = seq + 1
    member = tostring(seq)
  else
    seq = math.max(seq, tonumber(member))
  end
  if redis.call('ZSCORE', log, member) == false and redis.call('ZSCORE', log, member .. '!') == false then
    if settled then
      redis.call('ZADD', log, score, member .. '!')
    else
      redis.call('ZADD', log, score, member)
      redis.call('ZADD', flight, score, member)
      last = math.max(last, score)
    end
    added[#added + 1] = member
    added[#added + 1] = math.ceil(score)
  end
end
redis.call('HSET', meta, 'seq', seq, 'last', last)
vt_expire(log, meta, flight, now_ms, retain, tonumber(state[3] or 0), max_hold)
return added
