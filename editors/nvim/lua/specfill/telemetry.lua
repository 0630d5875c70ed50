-- User-acceptance reports to the server (counted in `specfill.stats` as userAcceptance; nothing
-- leaves the machine): each suggestion is reported shown once it is drawn, then accepted (the
-- item's own command on a full accept, as LSP 3.18 has it; specfill/accepted with the length
-- for a partial one) or dismissed (it went away with none of it accepted).
local M = {}

local methods = require('specfill.protocol').methods
M.SHOWN, M.ACCEPTED, M.DISMISSED = methods.shown, methods.accepted, methods.dismissed

--- The offer on screen (or hidden by a menu) now, or nil.
M.current = nil

--- The suggestion id the server gave `item` (in its accept command's arguments), or nil.
local function item_id(item)
  local args = type(item.command) == 'table' and item.command.arguments
  local first = type(args) == 'table' and args[1]
  return type(first) == 'table' and type(first.id) == 'number' and first.id or nil
end

--- A new suggestion from `client`: the offer suggestion.lua carries with its ghost text.
--- The previous one, if still open, ends now.
function M.offer(client, item)
  if M.current then
    M.ended(M.current)
  end
  M.current = { client = client, id = item_id(item), command = item.command, accepted = 0, shown = false }
  return M.current
end

local function notify(offer, method, params)
  if offer.id and not offer.client:is_stopped() then
    offer.client:notify(method, params)
  end
end

--- The offer was drawn: returns true the first time.
function M.shown(offer)
  if offer.shown then
    return false
  end
  offer.shown = true
  notify(offer, M.SHOWN, { id = offer.id })
  return true
end

--- `piece` of it was inserted; `full`: nothing of it is left. Returns true on its first accept.
function M.accepted(offer, piece, full)
  local first = offer.accepted == 0
  offer.accepted = offer.accepted + vim.fn.strchars(piece)
  if full and offer.id and type(offer.command) == 'table' then
    offer.client:exec_cmd(offer.command, { bufnr = vim.api.nvim_get_current_buf() }, function() end)
  else
    notify(offer, M.ACCEPTED, { id = offer.id, acceptedLength = offer.accepted, full = full })
  end
  return first
end

--- The offer's ghost text is gone for good.
function M.ended(offer)
  if M.current == offer then
    M.current = nil
  end
  if offer.shown and offer.accepted == 0 and not offer.ended then
    notify(offer, M.DISMISSED, { id = offer.id })
  end
  offer.ended = true
end

return M
