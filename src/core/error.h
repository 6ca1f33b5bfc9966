// hf2q::Error, fail() and str_cat(): defined with the public API.
#pragma once
#include "hf2q/error.h"
