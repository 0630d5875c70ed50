// From VS Code's `specfill.*` settings to what the server and the client need.
// No `vscode` import here: these are plain functions over a `get(key)` interface, so
// they can be unit-tested without VS Code.

/** The part of vscode.WorkspaceConfiguration these functions use. */
export interface ConfigurationLike {
  get<T>(key: string): T | undefined;
}

/** One entry of the manifest's contributes.configuration.properties. */
export interface PropertySpec {
  type?: string | string[];
  enum?: unknown[];
  pattern?: string;
  default?: unknown;
}

/** Keys under `specfill.` that only the extension reads; never sent to the server. */
export const EXTENSION_KEYS: readonly string[] = ['server.command', 'server.args', 'trace.server', 'trigger'];

const PREFIX = 'specfill.';

/** The server's settings (name -> manifest entry), read from the extension's package.json, which
 *  scripts/sync_settings.py writes from the server's own settings table. */
export function serverSettingSpecs(packageJson: unknown): Map<string, PropertySpec> {
  const props: Record<string, PropertySpec> =
    (packageJson as any)?.contributes?.configuration?.properties ?? {};
  const specs = new Map<string, PropertySpec>();
  for (const [key, spec] of Object.entries(props)) {
    const name = key.startsWith(PREFIX) ? key.slice(PREFIX.length) : undefined;
    if (name && !EXTENSION_KEYS.includes(name)) {
      specs.set(name, spec);
    }
  }
  return specs;
}

/** The `specfill` settings section for the server (initializationOptions,
 *  workspace/configuration answers and workspace/didChangeConfiguration). Values go as the user
 *  wrote them (draftLength "6" too: the server reads the number): the server validates and
 *  answers a bad value with a message that names it. A dotted name (`remote.apiKey`) goes inside
 *  its object (`remote: {apiKey}`), as the server takes it. */
export function toServerSettings(
  config: ConfigurationLike,
  specs: Map<string, PropertySpec>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of specs.keys()) {
    const value = config.get<unknown>(name);
    if (value === undefined) {
      continue;
    }
    const dot = name.indexOf('.');
    if (dot < 0) {
      out[name] = value;
    } else {
      const outer = name.slice(0, dot);
      const nested = (out[outer] ?? {}) as Record<string, unknown>;
      nested[name.slice(dot + 1)] = value;
      out[outer] = nested;
    }
  }
  return out;
}

export interface ServerCommand {
  command: string;
  args: string[];
}

/** How to start the server: `specfill.server.command` + `specfill.server.args`. */
export function serverCommand(config: ConfigurationLike): ServerCommand {
  const command = (config.get<string>('server.command') ?? '').trim() || 'specfill';
  const rawArgs = config.get<unknown>('server.args');
  const args = Array.isArray(rawArgs) ? rawArgs.map(String) : ['serve'];
  return { command, args };
}

/** What a configuration change means: send the new settings to the running server, and/or
 *  restart it because the command that starts it changed. */
export function classifyChange(
  affects: (section: string) => boolean,
  specs: Map<string, PropertySpec>,
): { notifyServer: boolean; restart: boolean } {
  const restart = affects(PREFIX + 'server');
  let notifyServer = false;
  for (const name of specs.keys()) {
    if (affects(PREFIX + name)) {
      notifyServer = true;
      break;
    }
  }
  return { notifyServer, restart };
}
