-- Where the user is editing: the mode and the cursor of the current window.
local api = vim.api

local M = {}

function M.in_insert_mode()
  local mode = api.nvim_get_mode().mode:sub(1, 1)
  return mode == 'i' or mode == 'R'
end

--- Normal mode, an operator pending included (`d` typed, its motion not yet).
function M.in_normal_mode()
  return api.nvim_get_mode().mode:sub(1, 1) == 'n'
end

--- The cursor as (row, col): 0-based row, 0-based byte column.
function M.cursor()
  local pos = api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

return M
