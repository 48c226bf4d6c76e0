# cmake -DINPUT=file -DOUTPUT=file.cc -DSYMBOL=name -P embed_file.cmake
# Writes a C++ file that defines `const unsigned char SYMBOL[]` holding the
# bytes of INPUT, and `const size_t SYMBOL##Size`.
file(READ ${INPUT} hex HEX)
string(LENGTH "${hex}" length)
math(EXPR bytes "${length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" body "${body}")
file(WRITE ${OUTPUT} "// Generated from ${INPUT} by cmake/embed_file.cmake.\n#include <cstddef>\n"
  "extern const unsigned char ${SYMBOL}[] = {\n${body}\n};\n"
  "extern const size_t ${SYMBOL}Size = ${bytes};\n")
