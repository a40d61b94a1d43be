// Standalone entry point of clef_backbone_dump (see runtime/backbone_dump.cc).
#include "ops/parallel.h"
#include "runtime/backbone.h"

int main(int argc, char** argv) {
  clef::ops::apply_default_wait_policy(argv);
  return clef::backbone_dump_main(argc, argv);
}
