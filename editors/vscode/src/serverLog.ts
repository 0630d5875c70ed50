// The level of each line the server writes to stderr. The server sends its log through
// window/logMessage once connected (vscode-languageclient shows those at their level); stderr
// carries what comes before the connection and crashes. Lines in Python logging's format keep
// their level; a traceback or a line that says error is an error; lines before the first log
// line are errors too (a usage error or a failed import: the server did not start); any other
// line (a traceback's body, a message's second line) keeps the level of the line before it.

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const LOGGING_LINE =
  /^(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)?\s+)?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b/;
const ERROR_LINE = /^Traceback \(most recent call last\)|\b(error|exception|fatal)\b/i;

const LEVELS: Record<string, LogLevel> = {
  DEBUG: 'debug',
  INFO: 'info',
  WARNING: 'warn',
  WARN: 'warn',
  ERROR: 'error',
  CRITICAL: 'error',
  FATAL: 'error',
};

export class StderrLevels {
  private current: LogLevel = 'error';

  level(line: string): LogLevel {
    const m = LOGGING_LINE.exec(line);
    if (m) {
      this.current = LEVELS[m[1]];
    } else if (ERROR_LINE.test(line)) {
      this.current = 'error';
    }
    return this.current;
  }
}
