-- slot_begin_task: a ready slot starts a task it popped from its country's list (PAGE_READY ->
-- RUNNING_SCRAPING_TASK), and the allocator's bookkeeping marks the task running. A slot that may not
-- start it (not ready, not its owner, ordered to close, moved) puts the task back at the list's head.
-- KEYS[1] slot (the slot record, hash; state_since, last_used (s))   KEYS[2] browser_tasks (the country's task list)
-- KEYS[3] recent_task_states (hash member -> "country|state|admitted at, s")
-- ARGV[1] owner (token)   ARGV[2] message (the task, JSON, as popped)   ARGV[3] member (bookkeeping "source|task id")
-- Returns {status, state}: status ok | not_ready | not_owner | missing | leaving
local slot_key, task_list, states = KEYS[1], KEYS[2], KEYS[3]
local owner, message, member = ARGV[1], ARGV[2], ARGV[3]
local record = redis.call('HMGET', slot_key, 'state', 'owner', 'retire', 'next_country')
local function refuse(status, state)
  redis.call('LPUSH', task_list, message)
  return {status, state or ''}
end
if not record[1] then return refuse('missing') end
if (record[2] or '') ~= owner then return refuse('not_owner', record[1]) end
if record[1] ~= 'PAGE_READY' then return refuse('not_ready', record[1]) end
if (record[3] or '0') == '1' or (record[4] or '') ~= '' then return refuse('leaving', record[1]) end
local now = server_now()
redis.call('HSET', slot_key, 'state', 'RUNNING_SCRAPING_TASK', 'state_since', fmt(now), 'last_used', fmt(now),
  'task', member)
local entry = redis.call('HGET', states, member)
if entry then
  local country, _, admitted = string.match(entry, '^([^|]*)|([^|]*)|(.*)$')
  redis.call('HSET', states, member, country .. '|running|' .. admitted)
end
return {'ok', 'RUNNING_SCRAPING_TASK'}
