-- slot_reassign: the allocator deletes a slot (ARGV[2] = '') or moves it to country ARGV[2]. A slot without
-- a page changes at once; a slot with a page (or a task) is marked, finishes its task, closes its page and
-- changes when it lands in NO_PAGE (slot_transition). Reassigning a slot to its own country cancels orders.
-- KEYS[1] slot (the slot record, hash)   KEYS[2] all_slots (set); no times
-- ARGV[1] slot_id   ARGV[2] new_country ('' = delete)   ARGV[3] country_prefix (country index key prefix)
-- Returns {status, state}: status deleted | moved | retiring | moving | kept | missing
local slot_key, all_slots = KEYS[1], KEYS[2]
local id, new_country, country_prefix = ARGV[1], ARGV[2], ARGV[3]
local record = redis.call('HMGET', slot_key, 'state', 'country')
local state, country = record[1], record[2]
if not state then return {'missing', ''} end
if new_country == country then
  redis.call('HSET', slot_key, 'retire', '0', 'next_country', '')
  return {'kept', state}
end
if new_country == '' then redis.call('HSET', slot_key, 'retire', '1') else
  redis.call('HSET', slot_key, 'retire', '0', 'next_country', new_country) end
if state == 'NO_PAGE' then return {land_in_no_page(slot_key, all_slots, country_prefix, id, server_now()), state} end
if new_country == '' then return {'retiring', state} end
return {'moving', state}
