# SPDX-License-Identifier: MIT
# bash completion for clef (installed as share/bash-completion/completions/clef).
# It reads the program's own help, so it completes exactly the commands and flags of the clef it
# runs: `clef --help` lists the commands, `clef CMD --help` the flags and, for a flag whose values
# are a fixed set (CLI11 prints them as TEXT:{a,b,c}), those values. Anything else completes file names.
_clef() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} clef=${COMP_WORDS[0]}
  COMPREPLY=()
  if ((COMP_CWORD == 1)); then
    local commands
    commands=$("$clef" --help 2>/dev/null | sed -n '/^\(Subcommands\|SUBCOMMANDS\):/,$ s/^  \([a-z][a-z0-9-]*\).*/\1/p')
    mapfile -t COMPREPLY < <(compgen -W "$commands --help --version" -- "$cur")
    return
  fi
  local help
  help=$("$clef" "${COMP_WORDS[1]}" --help 2>/dev/null) || return
  if [[ $prev == -* ]]; then
    # The help line of the previous flag; a fixed set of values shows as :{a,b,c}.
    local line values
    line=$(grep -E -- "(^|[ ,])${prev}( |$)" <<<"$help" | head -n 1)
    values=$(sed -n 's/.*:{\([^}]*\)}.*/\1/p' <<<"$line" | tr ',' ' ')
    if [[ -n $values ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$values" -- "$cur")
      return
    fi
  fi
  if [[ $cur == -* ]]; then
    # The flags that start an option line ("  -m,--model TEXT ..."), not those named in descriptions.
    local flags
    flags=$(sed -n 's/^  \(-[a-zA-Z0-9],\)\{0,1\}\(--[a-z0-9][a-z0-9-]*\).*/\2/p' <<<"$help")
    mapfile -t COMPREPLY < <(compgen -W "$flags" -- "$cur")
    return
  fi
  mapfile -t COMPREPLY < <(compgen -f -- "$cur")
}
complete -o filenames -o bashdefault -F _clef clef
