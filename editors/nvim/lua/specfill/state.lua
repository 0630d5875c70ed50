-- What the plugin's modules share at run time. setup() fills `opts`.
return {
  opts = nil, -- resolved options (config.resolve), nil until setup()
  enabled = true, -- :SpecfillToggle
}
