# scripts/checksrc_names.awk - the names a C file gives the rest of the
# program, for scripts/checksrc.sh's naming rule (STYLE.md, "For Elastic GPU"
# 1). Prints one line per name:
#
#   FILE:LINE: function NAME   a function defined or declared without static
#   FILE:LINE: variable NAME   a file-scope variable defined or declared
#                              without static (extern ones included)
#   FILE:LINE: type NAME       a struct, union or enum tag defined in a
#                              header (FILE ending in .h), or a typedef there
#
# Types in a .c file are not printed: no other file can name them. It reads
# the source as written, without a build: comments, string and character
# literals and preprocessor lines are dropped, then each file-scope
# statement (up to a ';' or a '{' outside parentheses) is judged by its
# shape, and a body ({...}) is skipped. It does not expand macros, so a name
# a macro makes (an X-macro list) is not seen. `extern "C" {` does not open
# a scope. Checked against nm: over src/, the functions and variables it
# prints for the .c files are exactly the global symbols of their objects.
# POSIX awk (Debian's mawk included).

# The identifier ending at or before index i of s (blanks skipped), "" when
# there is none; its start goes to NAMEPOS.
function ident_before(s, i, j)
{
    while (i > 0 && substr(s, i, 1) ~ /[ \t\n]/)
        i--
    j = i
    while (j > 0 && substr(s, j, 1) ~ /[A-Za-z0-9_]/)
        j--
    NAMEPOS = j + 1
    return substr(s, j + 1, i - j)
}

function report(kind, name, pos, t)
{
    if (name == "")
        return
    t = substr(STMT, 1, pos)
    print FILENAME ":" (SLINE + gsub(/\n/, "", t)) ": " kind " " name
}

# STMT with each __attribute__((...)) blanked out, positions kept.
function strip_attrs(s, p, d, k, c, b)
{
    while (match(s, /__attribute__[ \t\n]*\(/)) {
        p = RSTART
        d = 0
        for (k = RSTART + RLENGTH - 1; k <= length(s); k++) {
            c = substr(s, k, 1)
            if (c == "(")
                d++
            else if (c == ")" && --d == 0)
                break
        }
        b = ""
        while (length(b) < k - p + 1)
            b = b " "
        s = substr(s, 1, p - 1) b substr(s, k + 1)
    }
    return s
}

# Judge STMT, a file-scope statement ending at term ("{" or ";"). Returns
# what a "{" opens: "type" (a struct, union or enum body), "init" (an
# initializer), "func" (a function body), "externc", or "skip".
function classify(term, s, head, p, q, r, name)
{
    s = strip_attrs(STMT)
    head = s
    gsub(/[\n\t]/, " ", head)
    if (head ~ /^[ ]*$/)
        return "skip"
    if (term == "{" && head ~ /^[ ]*extern[ ]*""[ ]*$/) {
        EXTERNC++
        return "externc"
    }
    if (head ~ /(^|[^A-Za-z0-9_])static([^A-Za-z0-9_]|$)/)
        STATIC = 1
    if (head ~ /^[ ]*(_Static_assert|static_assert)[ ]*\(/)
        return "skip"
    # [qualifiers] struct|union|enum [NAME] {
    if (term == "{" && head ~ /(^|[ ])(struct|union|enum)([ ]+[A-Za-z_][A-Za-z0-9_]*)?[ ]*$/) {
        TYPEDEF = (head ~ /(^|[ ])typedef[ ]/)
        r = head
        sub(/[ ]*$/, "", r)
        if (r !~ /(^|[ ])(struct|union|enum)$/) {
            name = ident_before(s, length(r))
            if (ISHDR)
                report("type", name, NAMEPOS)
        }
        return "type"
    }
    # typedef ... NAME; or typedef ... (*NAME)(...);
    if (head ~ /^[ ]*typedef[ ]/) {
        if (term != ";")
            return "skip"
        if (match(s, /\([ \t\n]*\*[ \t\n]*[A-Za-z_][A-Za-z0-9_]*/))
            name = ident_before(s, RSTART + RLENGTH - 1)
        else {
            r = s
            sub(/[ \t\n]*$/, "", r)
            while (r ~ /\][ \t\n]*$/) {
                sub(/\[[^]]*\][ \t\n]*$/, "", r)
                sub(/[ \t\n]*$/, "", r)
            }
            name = ident_before(s, length(r))
        }
        if (ISHDR)
            report("type", name, NAMEPOS)
        return "skip"
    }
    # struct NAME; (a declaration of a tag defined elsewhere)
    if (term == ";" && head ~ /^[ ]*(struct|union|enum)[ ]+[A-Za-z_][A-Za-z0-9_]*[ ]*$/)
        return "skip"
    p = index(s, "=")
    if (!STATIC) {
        q = p ? substr(s, 1, p - 1) : s
        if (match(q, /\(/) && substr(q, RSTART + 1) ~ /^[ \t\n]*\*/) {
            # a pointer to a function: ... (*NAME)(...)
            p = RSTART
            match(substr(q, p), /\*[ \t\n]*[A-Za-z_][A-Za-z0-9_]*/)
            name = ident_before(s, p + RSTART + RLENGTH - 2)
            report("variable", name, NAMEPOS)
        } else if (match(q, /\(/)) {
            name = ident_before(s, RSTART - 1)
            report("function", name, NAMEPOS)
        } else {
            r = q
            sub(/[ \t\n]*$/, "", r)
            while (r ~ /\][ \t\n]*$/) {
                sub(/\[[^]]*\][ \t\n]*$/, "", r)
                sub(/[ \t\n]*$/, "", r)
            }
            name = ident_before(s, length(r))
            report("variable", name, NAMEPOS)
        }
    }
    if (term == "{")
        return index(s, "=") ? "init" : "func"
    return "skip"
}

FNR == 1 {
    DEPTH = 0   # braces open: > 0 inside a body
    PAREN = 0   # parentheses open at file scope
    STMT = ""   # the statement so far, "\n" between lines
    SLINE = 1   # its first line
    CMT = 0     # inside a comment
    PP = 0      # inside a preprocessor line continued with "\"
    EXTERNC = 0 # open extern "C" {
    STATIC = 0  # the statement is static
    TYPEDEF = 0 # the statement is a typedef
    KIND = ""   # what the open body is (classify)
    AFTER = 0   # a body just closed: 1 after a type's, 2 after an initializer
    ISHDR = (FILENAME ~ /\.h$/)
}

{
    line = $0
    if (!CMT && (PP || line ~ /^[ \t]*#/)) {
        PP = (line ~ /\\$/)
        if (STMT != "")
            STMT = STMT "\n"
        next
    }
    # the code of this line: comments out, literals emptied
    n = length(line)
    code = ""
    for (i = 1; i <= n; i++) {
        c = substr(line, i, 1)
        if (CMT) {
            if (c == "*" && substr(line, i + 1, 1) == "/") {
                CMT = 0
                i++
            }
            continue
        }
        if (c == "/" && substr(line, i + 1, 1) == "*") {
            CMT = 1
            i++
            code = code " "
            continue
        }
        if (c == "/" && substr(line, i + 1, 1) == "/")
            break
        if (c == "\"" || c == "\047") {
            for (j = i + 1; j <= n; j++) {
                d = substr(line, j, 1)
                if (d == "\\")
                    j++
                else if (d == c)
                    break
            }
            code = code c c
            i = j
            continue
        }
        code = code c
    }
    n = length(code)
    for (i = 1; i <= n; i++) {
        c = substr(code, i, 1)
        if (DEPTH > 0) {
            if (c == "{")
                DEPTH++
            else if (c == "}" && --DEPTH == 0) {
                STMT = ""
                SLINE = FNR
                if (KIND == "func") {
                    AFTER = 0
                    STATIC = 0
                    TYPEDEF = 0
                } else
                    AFTER = (KIND == "type") ? 1 : 2
            }
            continue
        }
        if (c == "(")
            PAREN++
        else if (c == ")")
            PAREN--
        if (PAREN == 0 && c == "}" && EXTERNC > 0) {
            EXTERNC--
            STMT = ""
            continue
        }
        if (PAREN == 0 && (c == ";" || c == "{")) {
            r = ""
            if (!AFTER)
                r = classify(c)
            else if (c == ";" && AFTER == 1 && (TYPEDEF ? ISHDR : !STATIC) &&
                     match(STMT, /[A-Za-z_][A-Za-z0-9_]*/))
                # "} NAME;" after a type's body: a variable of that type, or
                # the typedef's name
                report(TYPEDEF ? "type" : "variable", substr(STMT, RSTART, RLENGTH), RSTART)
            if (c == "{" && r != "externc") {
                DEPTH = 1
                KIND = r
            }
            if (c == ";") {
                AFTER = 0
                STATIC = 0
                TYPEDEF = 0
            }
            STMT = ""
            SLINE = FNR
            continue
        }
        if (STMT == "" && c ~ /[ \t]/)
            continue
        if (STMT == "")
            SLINE = FNR
        STMT = STMT c
    }
    if (STMT != "")
        STMT = STMT "\n"
}
