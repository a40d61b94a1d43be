// Standalone entry point of clef_backbone_dump (see runtime/backbone_dump.cc).
#include "runtime/backbone.h"

int main(int argc, char** argv) { return clef::backbone_dump_main(argc, argv); }
