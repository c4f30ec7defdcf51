// Shell completions and the manual page from the command line's definitions (docs_command.hpp).
#include "tarmac/cli/docs_command.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <functional>
#include <vector>

#include "tarmac/cli/app.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {

namespace {

// A subcommand people see: CLI11 hides one whose group is empty (tarmac's internal job-shim).
std::vector<const CLI::App*> visible_commands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); });
}

std::vector<const CLI::Option*> visible_options(const CLI::App& app) {
  return app.get_options([](const CLI::Option* o) { return !o->get_group().empty(); });
}

bool takes_value(const CLI::Option& o) { return o.get_items_expected_max() > 0; }

// "--min-free", "-n": each name an option answers to, long ones first.
std::vector<std::string> flag_names(const CLI::Option& o) {
  std::vector<std::string> out;
  for (const auto& l : o.get_lnames()) out.push_back("--" + l);
  for (const auto& s : o.get_snames()) out.push_back("-" + s);
  return out;
}

// "config web-config": the words that name a subcommand after `tarmac`.
std::string path_of(const CLI::App& app) {
  std::string out;
  for (const CLI::App* a = &app; a != nullptr && a->get_parent() != nullptr; a = a->get_parent()) {
    out = a->get_name() + (out.empty() ? "" : " " + out);
  }
  return out;
}

// Every visible command under `app` (itself first), depth first.
void walk(const CLI::App& app, const std::function<void(const CLI::App&)>& visit) {
  visit(app);
  for (const CLI::App* s : visible_commands(app)) walk(*s, visit);
}

// The first line of a description (help texts are one line; the page and scripts want one).
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string single_quoted_sh(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string single_quoted_fish(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// zsh's _describe entries: "name:description", a ':' in the name escaped.
std::string describe_entry(const std::string& name, const std::string& description) {
  std::string escaped;
  for (char c : name) {
    if (c == ':') escaped += '\\';
    escaped += c;
  }
  return single_quoted_sh(escaped + ":" + first_line(description));
}

// What to offer after the words naming `app`: its subcommands, then its options.
std::vector<std::string> words_after(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* s : visible_commands(app)) out.push_back(s->get_name());
  for (const CLI::Option* o : visible_options(app)) {
    for (const auto& n : flag_names(*o)) out.push_back(n);
  }
  return out;
}

// The shell functions bash and zsh share: the path of subcommands typed so far, from the words
// before the cursor (an option's value is skipped when the option takes one).
std::string path_functions(const CLI::App& app) {
  std::string subs;   // case arms: path) echo "names"
  std::string valued;  // options that take a value, anywhere (their next word is not a command)
  walk(app, [&](const CLI::App& a) {
    std::vector<std::string> names;
    for (const CLI::App* s : visible_commands(a)) names.push_back(s->get_name());
    if (!names.empty()) subs += fmt::format("    {}) echo {} ;;\n", single_quoted_sh(path_of(a)),
                                            single_quoted_sh(fmt::format("{}", fmt::join(names, " "))));
    for (const CLI::Option* o : visible_options(a)) {
      if (!takes_value(*o) || !o->nonpositional()) continue;
      for (const auto& n : flag_names(*o)) {
        if (valued.find("|" + n + "|") == std::string::npos) valued += "|" + n + "|";
      }
    }
  });
  std::string valued_pattern;
  for (std::size_t at = 0; at < valued.size();) {
    const auto end = valued.find('|', at + 1);
    valued_pattern += (valued_pattern.empty() ? "" : "|") + valued.substr(at + 1, end - at - 1);
    at = end + 1;
  }
  return fmt::format(R"sh(_tarmac_subcommands() {{
  case "$1" in
{}  esac
}}

# _tarmac_path WORD...: the subcommands the words name ("config web-config"), options skipped.
_tarmac_path() {{
  local cmdpath="" skip="" w
  for w in "$@"; do
    if [[ -n $skip ]]; then skip=""; continue; fi
    case $w in
      {}) skip=1 ;;
      -*) ;;
      *) if [[ " $(_tarmac_subcommands "$cmdpath") " == *" $w "* ]]; then cmdpath="${{cmdpath:+$cmdpath }}$w"; else break; fi ;;
    esac
  done
  echo "$cmdpath"
}}
)sh",
                     subs, valued_pattern.empty() ? "--no-such-option" : valued_pattern);
}

// The man page's lines for one option: .TP, its names (and VALUE), its help.
std::string man_option(const CLI::Option& o) {
  std::string names;
  if (o.nonpositional()) {
    for (const auto& n : flag_names(o)) {
      std::string roff;
      for (char c : n) roff += c == '-' ? std::string("\\-") : std::string(1, c);
      names += (names.empty() ? "" : ", ") + fmt::format("\\fB{}\\fR", roff);
    }
    if (takes_value(o)) names += " \\fIVALUE\\fR";
  } else {
    names = fmt::format("\\fI{}\\fR", detail::roff_text(o.get_name()));
  }
  std::string help = o.get_description();
  if (!o.get_envname().empty()) help += fmt::format(" (environment: {})", o.get_envname());
  return fmt::format(".TP\n{}\n{}\n", names, detail::roff_text(help.empty() ? std::string("(no description)") : help));
}

}  // namespace

namespace detail {

std::string roff_text(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\') out += "\\e";
    else out += c;
    line_start = c == '\n';
  }
  return out;
}

std::string bash_completion(const CLI::App& app) {
  std::string words;
  walk(app, [&](const CLI::App& a) {
    words += fmt::format("    {}) echo {} ;;\n", single_quoted_sh(path_of(a)),
                         single_quoted_sh(fmt::format("{}", fmt::join(words_after(a), " "))));
  });
  return fmt::format(R"sh(# bash completion for tarmac: generated by `tarmac completion bash` from its command line.
{}
_tarmac_words() {{
  case "$1" in
{}  esac
}}

_tarmac() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}}
  local cmdpath
  cmdpath=$(_tarmac_path "${{COMP_WORDS[@]:1:COMP_CWORD-1}}")
  COMPREPLY=($(compgen -W "$(_tarmac_words "$cmdpath")" -- "$cur"))
}}
complete -o default -F _tarmac tarmac
)sh",
                     path_functions(app), words);
}

std::string zsh_completion(const CLI::App& app) {
  std::string arms;
  walk(app, [&](const CLI::App& a) {
    std::string commands;
    std::string options;
    for (const CLI::App* s : visible_commands(a)) commands += " " + describe_entry(s->get_name(), s->get_description());
    for (const CLI::Option* o : visible_options(a)) {
      for (const auto& n : flag_names(*o)) options += " " + describe_entry(n, o->get_description());
    }
    arms += fmt::format("    {}) commands=({}); options=({}) ;;\n", single_quoted_sh(path_of(a)), commands, options);
  });
  return fmt::format(R"sh(#compdef tarmac
# zsh completion for tarmac: generated by `tarmac completion zsh` from its command line.
{}
_tarmac() {{
  # Not "path": zsh ties that name to PATH.
  local cmdpath
  local -a commands options
  cmdpath=$(_tarmac_path "${{(@)words[2,CURRENT-1]}}")
  case "$cmdpath" in
{}  esac
  (( ${{#commands}} )) && _describe -t commands 'tarmac command' commands
  (( ${{#options}} )) && _describe -t options 'option' options
  return 0
}}

_tarmac "$@"
)sh",
                     path_functions(app), arms);
}

std::string fish_completion(const CLI::App& app) {
  std::string out = "# fish completion for tarmac: generated by `tarmac completion fish` from its command line.\n"
                    "complete -c tarmac -f\n";
  walk(app, [&](const CLI::App& a) {
    const std::string path = path_of(a);
    // Where these apply: at the top before any subcommand, or once the subcommand's words were typed.
    std::string when;
    if (path.empty()) {
      when = "__fish_use_subcommand";
    } else {
      // Every word of the path: `backfill status` is not the top-level `status`.
      for (const CLI::App* p = &a; p != nullptr && p->get_parent() != nullptr; p = p->get_parent()) {
        when = fmt::format("__fish_seen_subcommand_from {}{}", p->get_name(), when.empty() ? "" : "; and " + when);
      }
    }
    for (const CLI::App* s : visible_commands(a)) {
      std::string cond = when;
      if (!path.empty()) {
        // Not again once one of this level's subcommands is there.
        std::string names;
        for (const CLI::App* t : visible_commands(a)) names += " " + t->get_name();
        cond += fmt::format("; and not __fish_seen_subcommand_from{}", names);
      }
      out += fmt::format("complete -c tarmac -n {} -a {} -d {}\n", single_quoted_fish(cond),
                         single_quoted_fish(s->get_name()), single_quoted_fish(first_line(s->get_description())));
    }
    for (const CLI::Option* o : visible_options(a)) {
      if (!o->nonpositional()) continue;
      std::string spec;
      for (const auto& l : o->get_lnames()) spec += " -l " + single_quoted_fish(l);
      for (const auto& s : o->get_snames()) spec += " -s " + single_quoted_fish(s);
      if (takes_value(*o)) spec += " -r";
      const std::string scope = path.empty() ? "" : " -n " + single_quoted_fish(when);
      out += fmt::format("complete -c tarmac{}{} -d {}\n", scope, spec, single_quoted_fish(first_line(o->get_description())));
    }
  });
  return out;
}

std::string man_page(const CLI::App& app, const std::string& version) {
  // "tarmac: see what ..." is the NAME line's "tarmac \- see what ...".
  const std::string& about = app.get_description();
  const auto colon = about.find(": ");
  const std::string summary = colon == std::string::npos ? about : about.substr(colon + 2);
  std::string out = fmt::format(".\\\" Generated by `tarmac man` from its command line: do not edit.\n"
                                ".TH TARMAC 1 \"\" \"tarmac {}\" \"User Commands\"\n"
                                ".SH NAME\ntarmac \\- {}\n"
                                ".SH SYNOPSIS\n.B tarmac\n[\\fIGLOBAL OPTIONS\\fR] [\\fICOMMAND\\fR] [\\fIOPTIONS\\fR] [\\fIARGS\\fR]\n"
                                ".SH DESCRIPTION\n"
                                "tarmac shows what every NVIDIA GPU is really doing, diagnoses training launches, records "
                                "telemetry, alerts, schedules jobs onto free GPUs and reclaims the ones nobody uses. "
                                "Without a command it runs \\fBtarmac status\\fR.\n"
                                ".SH GLOBAL OPTIONS\n",
                                roff_text(version), roff_text(summary));
  for (const CLI::Option* o : visible_options(app)) out += man_option(*o);
  out += ".SH COMMANDS\n";
  for (const CLI::App* top : visible_commands(app)) {
    walk(*top, [&](const CLI::App& a) {
      out += fmt::format(".SS \"tarmac {}\"\n{}\n", roff_text(path_of(a)),
                         roff_text(a.get_description().empty() ? std::string("(no description)") : a.get_description()));
      for (const CLI::Option* o : visible_options(a)) {
        if (o->get_lnames() == std::vector<std::string>{"help"}) continue;  // every command has it
        out += man_option(*o);
      }
    });
  }
  out += ".SH EXIT STATUS\n"
         ".TP\n0\nSuccess.\n"
         ".TP\n1\nThe command ran and found problems (warnings, a finding, no free GPU).\n"
         ".TP\n2\nA bad command line or input; nothing was changed.\n"
         ".TP\n3\nIt could not look: no driver library, an NVML error, no agent.\n"
         ".SH FILES\n"
         ".TP\n/etc/tarmac/tarmac.toml\nThe configuration (\\fBtarmac config\\fR prints the effective one).\n"
         ".TP\n/var/lib/tarmac/tarmac.db\nThe agent's store (SQLite).\n"
         ".TP\n/run/tarmac/locks\nThe lease directory \\fBpick\\fR, \\fBrun\\fR and the agent share.\n"
         ".SH ENVIRONMENT\n"
         ".TP\nNO_COLOR\nNo colour.\n"
         ".TP\nTARMAC_LOCK_DIR, TARMAC_SOCKET\nThe lease directory and the agent's socket.\n"
         ".TP\nTARMAC_NVML_LIB\nThe NVML library to load (as \\fB--nvml-lib\\fR).\n"
         ".TP\nTARMAC_NVML_PROFILE\nTime every NVML call; a table of them on stderr at the end.\n"
         ".SH SEE ALSO\n"
         "\\fBnvidia-smi\\fR(1), and the documentation in /usr/share/doc/tarmac/.\n";
  return out;
}

}  // namespace detail

void add_docs_commands(CLI::App& app, int& exit_code) {
  auto shell = std::make_shared<std::string>();
  auto* completion = app.add_subcommand("completion", "Print a shell completion script: completion bash|zsh|fish "
                                                      "(packages install them; or: source <(tarmac completion bash))");
  completion->add_option("shell", *shell, "bash, zsh or fish")->required();
  completion->callback([&exit_code, shell, completion] {
    const CLI::App& root = *completion->get_parent();
    if (*shell == "bash") fmt::print("{}", detail::bash_completion(root));
    else if (*shell == "zsh") fmt::print("{}", detail::zsh_completion(root));
    else if (*shell == "fish") fmt::print("{}", detail::fish_completion(root));
    else {
      fmt::print(stderr, "tarmac completion: '{}' is not a shell tarmac completes for: bash, zsh or fish\n",
                 util::terminal_text(*shell));
      exit_code = kExitUsage;
    }
  });
  auto* man = app.add_subcommand("man", "Print the manual page tarmac(1) as roff (man -l <(tarmac man))");
  man->callback([man] {
    const CLI::App& root = *man->get_parent();
    fmt::print("{}", detail::man_page(root, TARMAC_VERSION));
  });
}

}  // namespace tarmac::cli
