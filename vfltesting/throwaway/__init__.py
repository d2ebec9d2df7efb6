"""A throwaway algorithm that exists only here, to prove a new algorithm needs nothing outside its folder."""
